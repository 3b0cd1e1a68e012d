#ifndef REPLICAD_SERVER_ERROR_MESSAGE_H_
#define REPLICAD_SERVER_ERROR_MESSAGE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace replicad {

// Error messages quote what the client sent (names, shapes, values), and a
// client can send a lot: a 20 kB model name would not fit gRPC's 16 KiB
// limit on a status message, and the client would see a transport error
// instead of the answer. Every door sends its messages through this: at most
// kMaxErrorMessageBytes, cut at a UTF-8 character boundary, with how much was
// left out.
inline constexpr size_t kMaxErrorMessageBytes = 4096;
std::string BoundedMessage(absl::string_view message);

}  // namespace replicad

#endif  // REPLICAD_SERVER_ERROR_MESSAGE_H_
