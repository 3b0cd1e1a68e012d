#include "core/base/client_text.h"

#include "absl/strings/str_cat.h"

namespace replicad {

std::string ClientText(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back up over UTF-8 continuation bytes (10xxxxxx) to a character's start.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(text.substr(0, cut), "... (", text.size() - cut, " more bytes)");
}

}  // namespace replicad
