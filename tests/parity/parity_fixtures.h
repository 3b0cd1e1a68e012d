#ifndef REPLICAD_TESTS_PARITY_PARITY_FIXTURES_H_
#define REPLICAD_TESTS_PARITY_PARITY_FIXTURES_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"
#include "nlohmann/json.hpp"

namespace replicad::testing {

// What the parity tests share: running a fixture script of tests/parity once,
// and reading what it wrote (a manifest.json, .npy arrays).

// The value of environment variable `name`, or `fallback` when unset or empty.
std::string FromEnvOr(const char* name, const char* fallback);

// The outcome of running an export script.
struct Fixtures {
  std::string skip_reason;  // Non-empty: the interpreter lacks torch, torchvision or onnx.
  int exit_code = 0;
  std::string output;
};

// Runs `script OUT_DIR` with REPLICAD_PARITY_PYTHON (/usr/bin/python3 by
// default), or says why it cannot (skip_reason).
Fixtures RunExportScript(const std::string& script, const std::string& out_dir);

absl::StatusOr<nlohmann::json> ReadManifest(const std::string& path);

// A float32 (images, outputs) or int64 (token ids, masks, labels) .npy file.
absl::StatusOr<Tensor> ReadNpyTensor(const std::string& path);

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_PARITY_PARITY_FIXTURES_H_
