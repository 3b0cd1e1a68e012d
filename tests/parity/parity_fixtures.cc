#include "tests/parity/parity_fixtures.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "tests/testing/daemon_process.h"

namespace replicad::testing {

std::string FromEnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

Fixtures RunExportScript(const std::string& script, const std::string& out_dir) {
  Fixtures f;
  const std::string python = FromEnvOr("REPLICAD_PARITY_PYTHON", "/usr/bin/python3");
  CommandResult probe = RunCommand({python, "-c", "import torch, torchvision, onnx, numpy"});
  if (probe.exit_code != 0) {
    f.skip_reason = absl::StrCat(python, " cannot import torch, torchvision, onnx and numpy",
                                 " (scripts/install-deps.sh installs python3-torch",
                                 " python3-torchvision python3-onnx): ", probe.out);
    return f;
  }
  std::cout << script << " -> " << out_dir << std::endl;
  CommandResult run = RunCommand({python, script, out_dir});
  f.exit_code = run.exit_code;
  f.output = run.out;
  std::cout << run.out << std::flush;
  return f;
}

absl::StatusOr<nlohmann::json> ReadManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  nlohmann::json manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded()) return absl::InvalidArgumentError(path + ": not valid JSON");
  return manifest;
}

absl::StatusOr<Tensor> ReadNpyTensor(const std::string& path) {
  absl::StatusOr<v1::Tensor> proto = client::ReadNpy(path);
  if (!proto.ok()) return proto.status();
  if (proto->dtype() != v1::DATA_TYPE_FLOAT32 && proto->dtype() != v1::DATA_TYPE_INT64) {
    return absl::InvalidArgumentError(path + ": expected float32 or int64");
  }
  const DType dtype = proto->dtype() == v1::DATA_TYPE_INT64 ? DType::kInt64 : DType::kFloat32;
  Tensor t = Tensor::Host(dtype, Shape(proto->shape().begin(), proto->shape().end()));
  if (t.byte_size() != proto->raw().size()) {
    return absl::InvalidArgumentError(path + ": size does not match its shape");
  }
  std::copy(proto->raw().begin(), proto->raw().end(), static_cast<char*>(t.raw_data()));
  return t;
}

}  // namespace replicad::testing
