#include "core/metrics/fatal.h"

#include <cstdio>
#include <cstdlib>

namespace replicad {
namespace metrics {

void FatalProgrammerError(absl::string_view message) {
  std::fprintf(stderr, "replicad metrics: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace metrics
}  // namespace replicad
