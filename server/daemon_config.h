#ifndef REPLICAD_SERVER_DAEMON_CONFIG_H_
#define REPLICAD_SERVER_DAEMON_CONFIG_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "server/model_sources.h"
#include "server/replica_set_factory.h"
#include "server/server_options.h"
#include "server/tls_files.h"

namespace replicad {

// What `replicad serve`'s flags make of this machine, checked across flags
// and against its devices before anything starts, so that a typo fails at
// once rather than after the models loaded.
struct DaemonConfig {
  ServingOptions serving;           // Slots, merge device, plan memory, scheduling.
  std::vector<ModelSource> models;  // --model NAME=PATH, in order.
};

// InvalidArgument naming the flag, the expected and the received value, for
// any flag out of bounds or at odds with another (--load-model without
// explicit model control, poll without a repository, a preferred batch size
// above --max-batch-size, a Unix socket for HTTP, ...); the device map's
// own errors for slots this machine does not have.
absl::StatusOr<DaemonConfig> MakeDaemonConfig(const ServerOptions& options,
                                              const std::vector<DeviceInfo>& devices);

// Anyone who reaches a plain-text listener beyond this host can train the
// models, overwrite checkpoints under --checkpoint-root and, in explicit
// mode, load and unload models: logs a warning naming the listeners and
// what to do, unless TLS with tokens or client certificates guards them.
void WarnIfExposed(const ServerOptions& options, const TlsFiles& tls, bool auth);

}  // namespace replicad

#endif  // REPLICAD_SERVER_DAEMON_CONFIG_H_
