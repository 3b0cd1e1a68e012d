#ifndef REPLICAD_CORE_BASE_FATAL_H_
#define REPLICAD_CORE_BASE_FATAL_H_

#include "absl/strings/string_view.h"

namespace replicad {

// Writes "replicad: <component>: <message>" to stderr, flushes it and
// aborts. Only for programmer errors (an invalid metric name, an optimizer
// slot asked for twice): they are deterministic, so the first test run finds
// them, and going on would corrupt state a client relies on. Bad input
// from a client is never one: it gets a Status. The Abseil release we build
// against (Debian 12's 20220623) has no public CHECK; this is the one abort.
[[noreturn]] void FatalProgrammerError(absl::string_view component, absl::string_view message);

}  // namespace replicad

#endif  // REPLICAD_CORE_BASE_FATAL_H_
