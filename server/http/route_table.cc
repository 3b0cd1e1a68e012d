#include "server/http/route_table.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace replicad {
namespace {

std::string PercentDecoded(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    int value = 0;
    if (s[i] == '%' && i + 2 < s.size() && absl::SimpleHexAtoi(s.substr(i + 1, 2), &value)) {
      out.push_back(static_cast<char>(value));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool IsCapture(const std::string& segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

std::vector<std::string> PathSegments(absl::string_view path) {
  std::vector<std::string> segments;
  for (absl::string_view segment : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    segments.push_back(PercentDecoded(segment));
  }
  return segments;
}

bool MatchPath(const std::vector<std::string>& pattern, const std::vector<std::string>& path,
               PathParams* params) {
  if (pattern.size() != path.size()) return false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (IsCapture(pattern[i])) {
      (*params)[pattern[i].substr(1, pattern[i].size() - 2)] = path[i];
    } else if (pattern[i] != path[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace replicad
