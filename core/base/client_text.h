#ifndef REPLICAD_CORE_BASE_CLIENT_TEXT_H_
#define REPLICAD_CORE_BASE_CLIENT_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace replicad {

// A string a client sent (a model, input or output name, a path), as an
// error message quotes it: whole up to `max_bytes`, else its first bytes,
// cut at a UTF-8 character's start, and how many were left out:
//   "aaaa... (999744 more bytes)"
// So an answer still names what was wrong, and what was expected, without
// echoing a megabyte back to the client (or into a log).
inline constexpr size_t kMaxQuotedBytes = 256;
std::string ClientText(absl::string_view text, size_t max_bytes = kMaxQuotedBytes);

}  // namespace replicad

#endif  // REPLICAD_CORE_BASE_CLIENT_TEXT_H_
