#include "core/base/fatal.h"

#include <cstdio>
#include <cstdlib>

namespace replicad {

void FatalProgrammerError(absl::string_view component, absl::string_view message) {
  // Straight to stderr, not through the logger: an abort must not depend on
  // the logger's state, and death tests read stderr.
  std::fprintf(stderr, "replicad: %.*s: %.*s\n", static_cast<int>(component.size()),
               component.data(), static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace replicad
