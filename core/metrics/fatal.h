#ifndef REPLICAD_CORE_METRICS_FATAL_H_
#define REPLICAD_CORE_METRICS_FATAL_H_

#include "absl/strings/string_view.h"

namespace replicad {
namespace metrics {

// Writes "replicad metrics: <message>" to stderr and aborts. Only for
// programmer errors (an invalid metric name, a wrong label count): they are
// deterministic, so the first test run finds them. The Abseil release we build
// against (Debian 12's 20220623) has no public CHECK.
[[noreturn]] void FatalProgrammerError(absl::string_view message);

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_FATAL_H_
