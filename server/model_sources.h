#ifndef REPLICAD_SERVER_MODEL_SOURCES_H_
#define REPLICAD_SERVER_MODEL_SOURCES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace replicad {

// A model to serve: its name and its ONNX file (empty: the embedded default).
struct ModelSource {
  std::string name;
  std::string path;
};

// Parses one --model flag, "NAME=PATH". InvalidArgument naming the flag value
// when either side is empty.
absl::StatusOr<ModelSource> ParseModelFlag(const std::string& flag);

// Every DIR/NAME/model.onnx, sorted by NAME. NotFound when DIR is not a
// directory; a subdirectory without model.onnx is skipped.
absl::StatusOr<std::vector<ModelSource>> ScanModelRepository(const std::string& dir);

}  // namespace replicad

#endif  // REPLICAD_SERVER_MODEL_SOURCES_H_
