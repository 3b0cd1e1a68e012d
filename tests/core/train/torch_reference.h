#ifndef REPLICAD_TESTS_CORE_TRAIN_TORCH_REFERENCE_H_
#define REPLICAD_TESTS_CORE_TRAIN_TORCH_REFERENCE_H_

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/proto_tensors.h"

namespace replicad::testing {

// The directory a PyTorch reference script (tests/core/train/torch_*.py)
// wrote its files into: the script runs once per process, with
// /usr/bin/python3 (Debian's torch; REPLICAD_PARITY_PYTHON overrides it).
// Empty, after a test failure naming the script and its output, when it
// failed: torch is a test dependency (scripts/install-deps.sh), not optional.
inline const std::string& TorchReferenceOutput(const std::string& script) {
  static auto* const outputs = new std::map<std::string, std::string>;
  auto it = outputs->find(script);
  if (it != outputs->end()) return it->second;
  const char* given = std::getenv("REPLICAD_PARITY_PYTHON");
  const std::string python = given != nullptr && *given != '\0' ? given : "/usr/bin/python3";
  std::string out =
      absl::StrCat(::testing::TempDir(), "torch_reference_", outputs->size(), "_", getpid());
  CommandResult run = RunCommand({python, script, out});
  if (run.exit_code != 0) {
    ADD_FAILURE() << python << " " << script << " exited " << run.exit_code
                  << " (torch under /usr/bin/python3 is required):\n"
                  << run.out;
    out.clear();
  }
  return outputs->emplace(script, out).first->second;
}

// A .npy file the script wrote, as a host tensor (an empty one after a test failure).
inline Tensor ReadNpyTensor(const std::string& path) {
  absl::StatusOr<v1::Tensor> read = client::ReadNpy(path);
  EXPECT_TRUE(read.ok()) << read.status();
  return read.ok() ? FromProto(*read) : Tensor::Host(DType::kFloat32, {0});
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_CORE_TRAIN_TORCH_REFERENCE_H_
