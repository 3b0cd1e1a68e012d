#ifndef REPLICAD_SERVER_MODEL_SOURCES_H_
#define REPLICAD_SERVER_MODEL_SOURCES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace replicad {

// One version of a model to serve: its name, version and ONNX file (empty:
// the embedded default), and the model's Triton config.pbtxt if it has one.
struct ModelSource {
  std::string name;
  std::string path;
  int64_t version = 1;
  std::string config_path;  // DIR/NAME/config.pbtxt when that file exists; else empty.
};

// Parses one --model flag, "NAME=PATH" (version 1). InvalidArgument naming
// the flag value when either side is empty.
absl::StatusOr<ModelSource> ParseModelFlag(const std::string& flag);

// Every model version under DIR, sorted by name then version, in either
// layout: Triton's DIR/NAME/VERSION/model.onnx (VERSION a positive integer),
// or replicad's DIR/NAME/model.onnx (version 1). A model directory with
// version directories uses only those; one with neither is skipped. Every
// version of a model with a DIR/NAME/config.pbtxt carries its path. Hidden
// directories (".git", an upload being written) are skipped. NotFound,
// naming `flag` and DIR, when DIR is not a directory.
absl::StatusOr<std::vector<ModelSource>> ScanModelRepository(
    const std::string& dir, absl::string_view flag = "--model-repository");

// A string that changes when any of the files behind `sources` (their ONNX
// files and config.pbtxt) changes: their paths, sizes and times.
std::string FingerprintOf(const std::vector<ModelSource>& sources);

}  // namespace replicad

#endif  // REPLICAD_SERVER_MODEL_SOURCES_H_
