// Runs the ONNX backend node tests (/usr/share/libonnx-testdata/data/node) whose
// ops replicad supports through the ONNX importer, execution plans and the CPU kernels, and
// compares every output with the reference on every test_data_set_*.
//
// Prints one line per case: "PASS name", "SKIP name: <reason>" where the
// reason is "unsupported op X", "unsupported dtype Y" or "unsupported form:
// <Unimplemented message>", or "FAIL name: <why>" (a test failure); then
// "N passed, M skipped".
//
// Tolerances are ONNX's backend-test defaults (rtol 1e-3, atol 1e-7); integer
// and bool outputs must match exactly. Graph inputs that a shape rule needs as values
// (Reshape's `shape`) are bound as constants, as an initializer would be in a
// real model (see RunOnnxModel). Cases run the way replicad serves a model:
// ONNX import, a replica, its execution plan.
//
// The same source builds one test per backend: REPLICAD_TEST_DEVICE names the
// device its replica runs on ("cpu:0" by default; the CUDA build adds
// onnx_node_conformance_gpu_test on "cuda:0", labelled gpu, which skips where
// no GPU is present).
//
// Suites: the ONNX backend data's node, pytorch-converted and pytorch-operator directories. Every
// skip names an unsupported op, an unsupported dtype (float16, double, bool, int8, ...) or an
// unsupported form (training mode, MaxPool's Indices). On cuda:0
// every supported op must pass at least one case, except those the CUDA backend refuses as
// lacking a kernel or a dtype (printed as NOTE lines; docs/status.md lists them). The counts at a
// given commit are in benchmarks/RESULTS.md.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/device/device_id.h"
#include "core/model/onnx_tensor.h"
#include "core/ops/op_registry.h"
#include "core/tensor/half_float.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/onnx_node_runner.h"

namespace replicad {
namespace {

namespace fs = std::filesystem;

#ifndef REPLICAD_TEST_DEVICE
#define REPLICAD_TEST_DEVICE "cpu:0"
#endif

constexpr char kDataDir[] = "/usr/share/libonnx-testdata/data";

DeviceId TestDevice() { return *ParseDeviceId(REPLICAD_TEST_DEVICE); }

// Why the test device cannot run cases here, or nullopt.
std::optional<std::string> DeviceMissing() {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) return devices.status().ToString();
  if (FindDevice(*devices, TestDevice()) != nullptr) return std::nullopt;
  return absl::StrCat(REPLICAD_TEST_DEVICE, " is not present on this machine");
}

#define REPLICAD_SKIP_WITHOUT_TEST_DEVICE()                   \
  if (std::optional<std::string> missing = DeviceMissing()) { \
    GTEST_SKIP() << *missing;                                 \
  }
constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;

template <typename Proto>
bool ReadProto(const fs::path& path, Proto* proto) {
  std::ifstream in(path, std::ios::binary);
  return in && proto->ParseFromIstream(&in);
}

// The reason to skip a case before running it: an op or a value type replicad
// does not compute. nullopt when the case should run.
std::optional<std::string> StaticSkipReason(const onnx::ModelProto& model) {
  std::set<std::string> supported;
  for (std::string_view op : SupportedOps()) supported.insert(std::string(op));
  for (const onnx::NodeProto& node : model.graph().node()) {
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    if (!default_domain || supported.count(node.op_type()) == 0) {
      return absl::StrCat("unsupported op ", default_domain ? "" : node.domain() + ".",
                          node.op_type());
    }
  }
  std::vector<const onnx::ValueInfoProto*> values;
  for (const auto& v : model.graph().input()) values.push_back(&v);
  for (const auto& v : model.graph().output()) values.push_back(&v);
  for (const onnx::ValueInfoProto* value : values) {
    const onnx::TypeProto& type = value->type();
    if (type.has_sequence_type()) return std::string("unsupported dtype sequence");
    if (type.has_optional_type()) return std::string("unsupported dtype optional");
    if (type.has_map_type()) return std::string("unsupported dtype map");
    if (!type.has_tensor_type()) return std::string("unsupported dtype non-tensor");
    if (!DTypeFromOnnx(type.tensor_type().elem_type()).ok()) {
      return absl::StrCat("unsupported dtype ", OnnxDataTypeName(type.tensor_type().elem_type()));
    }
  }
  return std::nullopt;
}

// Empty when `actual` matches `expected` within the tolerances, else why not.
std::string Compare(const Tensor& actual, const Tensor& expected) {
  if (!(actual.type() == expected.type())) {
    return absl::StrCat("got ", TensorTypeToString(actual.type()), ", expected ",
                        TensorTypeToString(expected.type()));
  }
  if (IsHalfFloatDType(expected.dtype())) {
    // One step of the 16-bit type: replicad computes a float16 graph in float32 and rounds
    // once at the output, where ONNX's numpy reference rounds at every node (and ONNX 1.12
    // truncates float32 to bfloat16 where replicad rounds to nearest even).
    const DType dtype = expected.dtype();
    const double rtol = std::ldexp(1.0, dtype == DType::kFloat16 ? -10 : -7);
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      const double a = HalfFloatBitsToFloat(dtype, actual.data<uint16_t>()[i]);
      const double e = HalfFloatBitsToFloat(dtype, expected.data<uint16_t>()[i]);
      if (std::isnan(e) && std::isnan(a)) continue;
      if (a == e) continue;  // Infinities.
      if (!(std::fabs(a - e) <= kAtol + rtol * std::fabs(e))) {
        return absl::StrCat("element ", i, " is ", a, ", expected ", e);
      }
    }
    return "";
  }
  if (expected.dtype() != DType::kFloat32) {
    return VisitDType(expected.dtype(), [&](auto traits) -> std::string {
      using T = typename decltype(traits)::Type;
      for (int64_t i = 0; i < expected.num_elements(); ++i) {
        const int64_t a = actual.data<T>()[i];
        const int64_t e = expected.data<T>()[i];
        if (a != e) return absl::StrCat("element ", i, " is ", a, ", expected ", e);
      }
      return "";
    });
  }
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double a = actual.data<float>()[i];
    const double e = expected.data<float>()[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    if (a == e) continue;  // Infinities.
    if (!(std::fabs(a - e) <= kAtol + kRtol * std::fabs(e))) {
      return absl::StrCat("element ", i, " is ", a, ", expected ", e);
    }
  }
  return "";
}

enum class Outcome { kPass, kSkip, kFail };

struct CaseResult {
  Outcome outcome;
  std::string detail;
};

// numpy has no bfloat16, and ONNX 1.12's test data stores a BFLOAT16 value's
// bits as UINT16: read as the graph declares it.
void AsDeclared(const onnx::ValueInfoProto& declared, onnx::TensorProto* proto) {
  if (proto->data_type() == onnx::TensorProto::UINT16 &&
      declared.type().tensor_type().elem_type() == onnx::TensorProto::BFLOAT16) {
    proto->set_data_type(onnx::TensorProto::BFLOAT16);
  }
}

// Loads the inputs of one test_data_set_* and runs the case.
CaseResult RunDataSet(const onnx::ModelProto& model, const fs::path& data_set) {
  std::set<std::string> initializers;
  for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
  std::vector<const onnx::ValueInfoProto*> graph_inputs;
  for (const auto& input : model.graph().input()) {
    if (initializers.count(input.name()) == 0) graph_inputs.push_back(&input);
  }
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < graph_inputs.size(); ++i) {
    onnx::TensorProto proto;
    const fs::path path = data_set / absl::StrCat("input_", i, ".pb");
    if (!ReadProto(path, &proto))
      return {Outcome::kFail, absl::StrCat("cannot read ", path.string())};
    AsDeclared(*graph_inputs[i], &proto);
    absl::StatusOr<Tensor> tensor = TensorFromOnnx(proto);
    if (!tensor.ok()) {
      return {Outcome::kFail, absl::StrCat(path.string(), ": ", tensor.status().message())};
    }
    inputs.push_back(*std::move(tensor));
  }
  absl::StatusOr<std::vector<Tensor>> outputs = RunOnnxModel(model, inputs, TestDevice());
  if (!outputs.ok()) {
    if (absl::IsUnimplemented(outputs.status())) {
      return {Outcome::kSkip, absl::StrCat("unsupported form: ", outputs.status().message())};
    }
    return {Outcome::kFail, outputs.status().ToString()};
  }
  for (int i = 0; i < model.graph().output_size(); ++i) {
    onnx::TensorProto proto;
    const fs::path path = data_set / absl::StrCat("output_", i, ".pb");
    if (!ReadProto(path, &proto))
      return {Outcome::kFail, absl::StrCat("cannot read ", path.string())};
    AsDeclared(model.graph().output(i), &proto);
    absl::StatusOr<Tensor> expected = TensorFromOnnx(proto);
    if (!expected.ok()) {
      return {Outcome::kFail, absl::StrCat(path.string(), ": ", expected.status().message())};
    }
    const std::string mismatch = Compare((*outputs)[i], *expected);
    if (!mismatch.empty()) {
      return {Outcome::kFail, absl::StrCat(data_set.filename().string(), " output ", i, " '",
                                           model.graph().output(i).name(), "': ", mismatch)};
    }
  }
  return {Outcome::kPass, ""};
}

CaseResult RunCase(const fs::path& dir) {
  onnx::ModelProto model;
  if (!ReadProto(dir / "model.onnx", &model)) return {Outcome::kFail, "cannot read model.onnx"};
  if (std::optional<std::string> reason = StaticSkipReason(model)) {
    return {Outcome::kSkip, *reason};
  }
  std::vector<fs::path> data_sets;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
      data_sets.push_back(entry.path());
    }
  }
  std::sort(data_sets.begin(), data_sets.end());
  if (data_sets.empty()) return {Outcome::kFail, "no test_data_set_* folder"};
  for (const fs::path& data_set : data_sets) {
    CaseResult result = RunDataSet(model, data_set);
    if (result.outcome != Outcome::kPass) return result;
  }
  return {Outcome::kPass, ""};
}

struct SuiteTally {
  int passed = 0;
  int skipped = 0;
  std::set<std::string> ops_passed;
  // Ops of the cases whose ops and dtypes replicad supports (those that run).
  std::set<std::string> ops_runnable;
  // Ops of cases the test device's backend refused as lacking a kernel or a
  // dtype (the CUDA backend has none for the operators added for
  // transformers; docs/status.md lists them).
  std::set<std::string> ops_backend_lacks;
};

// Runs every case folder under `root`, printing a line per case and the
// totals; a case that should pass and does not is a test failure.
SuiteTally RunSuite(const fs::path& root) {
  SuiteTally tally;
  EXPECT_TRUE(fs::is_directory(root))
      << root << " is missing; install libonnx-testdata (scripts/install-deps.sh)";
  if (!fs::is_directory(root)) return tally;
  std::vector<fs::path> cases;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  int failed = 0;
  for (const fs::path& dir : cases) {
    const std::string name = dir.filename().string();
    onnx::ModelProto model;
    const bool readable = ReadProto(dir / "model.onnx", &model);
    if (readable && !StaticSkipReason(model)) {
      for (const auto& node : model.graph().node()) tally.ops_runnable.insert(node.op_type());
    }
    const CaseResult result = RunCase(dir);
    switch (result.outcome) {
      case Outcome::kPass:
        ++tally.passed;
        std::printf("PASS %s\n", name.c_str());
        for (const auto& node : model.graph().node()) tally.ops_passed.insert(node.op_type());
        break;
      case Outcome::kSkip:
        ++tally.skipped;
        if (result.detail.find("the CUDA backend") != std::string::npos) {
          for (const auto& node : model.graph().node()) {
            tally.ops_backend_lacks.insert(node.op_type());
          }
        }
        std::printf("SKIP %s: %s\n", name.c_str(), result.detail.c_str());
        break;
      case Outcome::kFail:
        ++failed;
        std::printf("FAIL %s: %s\n", name.c_str(), result.detail.c_str());
        ADD_FAILURE() << name << ": " << result.detail;
        break;
    }
  }
  std::printf("%s: %d passed, %d skipped\n", root.filename().c_str(), tally.passed, tally.skipped);
  std::printf("%d passed, %d skipped\n", tally.passed, tally.skipped);
  if (failed != 0) std::printf("%d failed\n", failed);
  return tally;
}

TEST(OnnxNodeConformanceTest, SupportedCasesMatchReference) {
  REPLICAD_SKIP_WITHOUT_TEST_DEVICE();
  const SuiteTally tally = RunSuite(fs::path(kDataDir) / "node");
  // A supported op whose every case is skipped would otherwise go unnoticed.
  // The exception is an op none of whose cases can run because each uses a
  // dtype replicad lacks (all of Cast's involve float16, double, bfloat16 or
  // string); its unit tests must cover it.
  for (std::string_view op : SupportedOps()) {
    if (tally.ops_runnable.count(std::string(op)) == 0) {
      std::printf("NOTE every node case of supported op %s uses an unsupported dtype\n",
                  std::string(op).c_str());
      continue;
    }
    if (tally.ops_passed.count(std::string(op)) == 0 &&
        tally.ops_backend_lacks.count(std::string(op)) != 0) {
      std::printf("NOTE the %s backend computes no case of supported op %s\n", REPLICAD_TEST_DEVICE,
                  std::string(op).c_str());
      continue;
    }
    EXPECT_EQ(tally.ops_passed.count(std::string(op)), 1u)
        << "no conformance case of supported op " << op << " passed";
  }
}

// PyTorch modules and functions exported to ONNX (older opsets, converted to
// opset 11 on import).
TEST(OnnxNodeConformanceTest, PytorchConvertedCasesMatchReference) {
  REPLICAD_SKIP_WITHOUT_TEST_DEVICE();
  RunSuite(fs::path(kDataDir) / "pytorch-converted");
}

TEST(OnnxNodeConformanceTest, PytorchOperatorCasesMatchReference) {
  REPLICAD_SKIP_WITHOUT_TEST_DEVICE();
  RunSuite(fs::path(kDataDir) / "pytorch-operator");
}

}  // namespace
}  // namespace replicad
