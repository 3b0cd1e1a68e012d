#ifndef REPLICAD_SERVER_FLAGS_H_
#define REPLICAD_SERVER_FLAGS_H_

#include "CLI/CLI.hpp"
#include "server/server_options.h"

namespace replicad {

// Adds the `serve` subcommand to `app`, its flags writing into `options`
// (which must outlive parsing), in --help groups by topic. Only the flags'
// syntax and single-flag bounds are checked here (CLI11 exits with its
// usage message); checks across flags and devices are daemon_config.h's.
CLI::App* AddServeCommand(CLI::App& app, ServerOptions& options);

}  // namespace replicad

#endif  // REPLICAD_SERVER_FLAGS_H_
