#include "server/checkpoint_rotation.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/train/checkpoint.h"

namespace replicad {
namespace {

constexpr char kStepInfix[] = "-step";
constexpr char kSuffix[] = ".onnx";

// The step of `file` when it is MODEL-step<digits>.onnx, else -1.
int64_t StepOf(const std::string& file, const std::string& model) {
  const std::string prefix = absl::StrCat(model, kStepInfix);
  if (!absl::StartsWith(file, prefix) || !absl::EndsWith(file, kSuffix)) return -1;
  const std::string digits =
      file.substr(prefix.size(), file.size() - prefix.size() - (sizeof(kSuffix) - 1));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) return -1;
  int64_t step = -1;
  return absl::SimpleAtoi(digits, &step) ? step : -1;
}

absl::Status Unlink(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  return absl::ErrnoToStatus(errno, absl::StrCat("unlink ", path));
}

}  // namespace

std::string NumberedCheckpointPath(const std::string& directory, const std::string& model,
                                   int64_t step) {
  return absl::StrFormat("%s/%s%s%09d%s", directory, model, kStepInfix, step, kSuffix);
}

absl::Status PruneNumberedCheckpoints(const std::string& directory, const std::string& model,
                                      int keep) {
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("opendir ", directory));
  std::vector<std::pair<int64_t, std::string>> numbered;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    const int64_t step = StepOf(name, model);
    if (step < 0) continue;
    const std::string path = absl::StrCat(directory, "/", name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    numbered.emplace_back(step, path);
  }
  ::closedir(dir);
  std::sort(numbered.begin(), numbered.end(), std::greater<>());
  absl::Status first_error;
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < numbered.size(); ++i) {
    // The ONNX file first: a state file alone is never read.
    first_error.Update(Unlink(numbered[i].second));
    first_error.Update(Unlink(CheckpointStatePath(numbered[i].second)));
  }
  return first_error;
}

}  // namespace replicad
