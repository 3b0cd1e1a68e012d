#include "server/model_sources.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace replicad {

absl::StatusOr<ModelSource> ParseModelFlag(const std::string& flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model '", flag, "' must be NAME=PATH, e.g. mnist=/models/mnist.onnx"));
  }
  return ModelSource{flag.substr(0, eq), flag.substr(eq + 1)};
}

absl::StatusOr<std::vector<ModelSource>> ScanModelRepository(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return absl::NotFoundError(
        absl::StrCat("--model-repository '", dir, "' is not a directory"));
  }
  std::vector<ModelSource> sources;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const fs::path file = entry.path() / "model.onnx";
    if (entry.is_directory() && fs::is_regular_file(file)) {
      sources.push_back({entry.path().filename().string(), file.string()});
    }
  }
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("--model-repository '", dir, "': ", error.message()));
  }
  std::sort(sources.begin(), sources.end(),
            [](const ModelSource& a, const ModelSource& b) { return a.name < b.name; });
  return sources;
}

}  // namespace replicad
