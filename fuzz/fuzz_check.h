#ifndef REPLICAD_FUZZ_FUZZ_CHECK_H_
#define REPLICAD_FUZZ_FUZZ_CHECK_H_

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace replicad::fuzz {

// What every fuzzer's invariants share. A violation aborts, which libFuzzer
// records as a crash with the input that caused it.

// Aborts with `what` on stderr: an invariant the fuzzer checks does not hold.
[[noreturn]] inline void Violated(absl::string_view what) {
  std::fprintf(stderr, "fuzz invariant violated: %.*s\n", static_cast<int>(what.size()),
               what.data());
  std::abort();
}

// Product of `shape` times `element_size`, or -1 on a negative dim or overflow.
inline int64_t ByteCount(const std::vector<int64_t>& shape, int64_t element_size) {
  int64_t total = element_size;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && total > std::numeric_limits<int64_t>::max() / d) return -1;
    total *= d;
  }
  return total;
}

// A new directory for a fuzzer's files, under $TMPDIR (scripts/fuzz.sh points
// it at a directory it removes afterwards) or /tmp.
inline std::string NewTempDirectory(const char* prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string name =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  if (mkdtemp(name.data()) == nullptr) Violated("mkdtemp failed");
  return name;
}

}  // namespace replicad::fuzz

#endif  // REPLICAD_FUZZ_FUZZ_CHECK_H_
