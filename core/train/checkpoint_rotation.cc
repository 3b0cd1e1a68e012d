#include "core/train/checkpoint_rotation.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

// The model's name as a file name: a '/' would name a directory.
std::string FileStem(const std::string& model) {
  std::string stem = model;
  std::replace(stem.begin(), stem.end(), '/', '_');
  return stem;
}

// The step of `file` when it is MODEL-step<digits>.onnx, else -1.
int64_t StepOf(const std::string& file, const std::string& model) {
  const std::string prefix = absl::StrCat(FileStem(model), kStepInfix);
  if (!absl::StartsWith(file, prefix) || !absl::EndsWith(file, kSuffix)) return -1;
  const std::string digits =
      file.substr(prefix.size(), file.size() - prefix.size() - (sizeof(kSuffix) - 1));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) return -1;
  int64_t step = -1;
  return absl::SimpleAtoi(digits, &step) ? step : -1;
}

absl::Status Unlink(const CheckpointDirectory& directory, const std::string& name) {
  if (::unlinkat(directory.fd(), name.c_str(), 0) == 0 || errno == ENOENT) return absl::OkStatus();
  return absl::ErrnoToStatus(errno, absl::StrCat("unlink ", directory.PathOf(name)));
}

}  // namespace

std::string NumberedCheckpointName(const std::string& model, int64_t step) {
  return absl::StrFormat("%s%s%09d%s", FileStem(model), kStepInfix, step, kSuffix);
}

std::string NumberedCheckpointPath(const std::string& directory, const std::string& model,
                                   int64_t step) {
  return absl::StrCat(directory, "/", NumberedCheckpointName(model, step));
}

absl::Status PruneNumberedCheckpoints(const CheckpointDirectory& directory,
                                      const std::string& model, int keep, const std::string& run_id,
                                      const std::vector<std::string>& spare) {
  if (run_id.empty()) return absl::OkStatus();  // Nothing can be proven ours.
  // readdir closes what it reads: a duplicate, so `directory` stays open.
  const int listing = ::fcntl(directory.fd(), F_DUPFD_CLOEXEC, 0);
  DIR* dir = listing < 0 ? nullptr : ::fdopendir(listing);
  if (dir == nullptr) {
    const int error = errno;
    if (listing >= 0) ::close(listing);
    return absl::ErrnoToStatus(error, absl::StrCat("opendir ", directory.path()));
  }
  ::rewinddir(dir);
  // Spared files by identity, whatever path names them.
  std::vector<std::pair<dev_t, ino_t>> spared;
  for (const std::string& path : spare) {
    struct stat st;
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) spared.emplace_back(st.st_dev, st.st_ino);
  }
  struct Numbered {
    int64_t written_ns;
    int64_t step;
    std::string name;
    bool spared;
  };
  std::vector<Numbered> numbered;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    const int64_t step = StepOf(name, model);
    if (step < 0) continue;
    struct stat st;
    if (::fstatat(directory.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
      continue;
    }
    absl::StatusOr<std::string> writer = ReadCheckpointRunId(directory, name);
    if (!writer.ok() || *writer != run_id) continue;
    const bool is_spared = std::find(spared.begin(), spared.end(),
                                     std::make_pair(st.st_dev, st.st_ino)) != spared.end();
    numbered.push_back(
        {int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, step, name, is_spared});
  }
  ::closedir(dir);
  std::sort(numbered.begin(), numbered.end(), [](const Numbered& a, const Numbered& b) {
    return a.written_ns != b.written_ns ? a.written_ns > b.written_ns : a.step > b.step;
  });
  absl::Status first_error;
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < numbered.size(); ++i) {
    if (numbered[i].spared) continue;
    // The ONNX file first: a state file alone is never read.
    first_error.Update(Unlink(directory, numbered[i].name));
    first_error.Update(Unlink(directory, CheckpointStateName(numbered[i].name)));
  }
  return first_error;
}

}  // namespace replicad
