#include "server/error_message.h"

#include "core/base/client_text.h"

namespace replicad {

std::string BoundedMessage(absl::string_view message) {
  return ClientText(message, kMaxErrorMessageBytes);
}

}  // namespace replicad
