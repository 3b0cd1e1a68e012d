#include "core/train/training_ranks.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace replicad {

absl::StatusOr<std::vector<std::string>> GatherReadiness(TrainingRanks& ranks,
                                                         const absl::Status& local,
                                                         const std::string& description) {
  // "<status code>:<message, or the description when OK>".
  const std::string mine =
      absl::StrCat(static_cast<int>(local.code()), ":", local.ok() ? description : local.message());
  absl::StatusOr<std::vector<std::string>> every = ranks.AllGather(mine);
  if (!every.ok()) return every.status();
  if (!local.ok()) return local;
  std::vector<std::string> descriptions;
  for (size_t r = 0; r < every->size(); ++r) {
    const std::string& part = (*every)[r];
    const size_t colon = part.find(':');
    int code = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(part.substr(0, colon), &code)) {
      return absl::InternalError(absl::StrCat("rank ", r, " sent a malformed readiness"));
    }
    if (code != 0) {
      return absl::Status(static_cast<absl::StatusCode>(code),
                          absl::StrCat("rank ", r, " of ", every->size(), ": ",
                                       absl::string_view(part).substr(colon + 1)));
    }
    descriptions.push_back(part.substr(colon + 1));
  }
  return descriptions;
}

}  // namespace replicad
