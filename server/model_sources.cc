#include "server/model_sources.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace replicad {
namespace fs = std::filesystem;

absl::StatusOr<ModelSource> ParseModelFlag(const std::string& flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model '", flag, "' must be NAME=PATH, e.g. mnist=/models/mnist.onnx"));
  }
  return ModelSource{flag.substr(0, eq), flag.substr(eq + 1), 1, ""};
}

namespace {

// DIR/NAME/VERSION/model.onnx for every VERSION directory of `model_dir`.
std::vector<ModelSource> VersionedSources(const fs::path& model_dir, const std::string& name) {
  std::vector<ModelSource> sources;
  std::error_code error, ignored;  // An unreadable version directory is skipped.
  for (const fs::directory_entry& entry : fs::directory_iterator(model_dir, error)) {
    int64_t version = 0;
    const fs::path file = entry.path() / "model.onnx";
    if (entry.is_directory(ignored) &&
        absl::SimpleAtoi(entry.path().filename().string(), &version) && version > 0 &&
        fs::is_regular_file(file, ignored)) {
      sources.push_back(ModelSource{name, file.string(), version, ""});
    }
  }
  return sources;
}

}  // namespace

absl::StatusOr<std::vector<ModelSource>> ScanModelRepository(const std::string& dir,
                                                             absl::string_view flag) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat(flag, " '", dir, "' is not a directory"));
  }
  std::vector<ModelSource> sources;
  // `error` is the listing's own; a model directory that cannot be read is skipped.
  std::error_code ignored;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory(ignored) || name.empty() || name[0] == '.') continue;
    std::vector<ModelSource> versions = VersionedSources(entry.path(), name);
    const fs::path flat = entry.path() / "model.onnx";
    if (versions.empty() && fs::is_regular_file(flat, ignored)) {
      versions.push_back(ModelSource{name, flat.string(), 1, ""});
    }
    const fs::path config = entry.path() / "config.pbtxt";
    if (fs::is_regular_file(config, ignored)) {
      for (ModelSource& version : versions) version.config_path = config.string();
    }
    sources.insert(sources.end(), versions.begin(), versions.end());
  }
  if (error) {
    return absl::NotFoundError(absl::StrCat(flag, " '", dir, "': ", error.message()));
  }
  std::sort(sources.begin(), sources.end(), [](const ModelSource& a, const ModelSource& b) {
    return a.name != b.name ? a.name < b.name : a.version < b.version;
  });
  return sources;
}

std::string FingerprintOf(const std::vector<ModelSource>& sources) {
  std::string fingerprint;
  auto add = [&](const fs::path& file) {
    std::error_code error;
    const auto size = fs::file_size(file, error);
    if (error) return;
    const auto time = fs::last_write_time(file, error).time_since_epoch().count();
    absl::StrAppend(&fingerprint, file.string(), ":", size, ":", time, ";");
  };
  for (const ModelSource& source : sources) {
    if (!source.path.empty()) add(source.path);
  }
  // Every version names the same config.pbtxt; once is enough. A config that
  // appears or goes away changes the string too (its path comes or goes).
  if (!sources.empty() && !sources[0].config_path.empty()) add(sources[0].config_path);
  return fingerprint;
}

}  // namespace replicad
