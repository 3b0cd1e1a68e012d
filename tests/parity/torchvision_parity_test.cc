// Parity with PyTorch: torchvision models (resnet18, mobilenet_v2, squeezenet1_1,
// densenet121, efficientnet_b0, shufflenet_v2_x0_5, mnasnet0_75), a small ConvNeXt of torchvision's
// blocks (LayerNorm, exact GELU, linear layers over channels-last values) and Keras-style models (a
// depthwise-separable Xception entry flow, a two-input two-output Siamese pair with shared
// weights), built by
// tests/parity/export_torch_models.py with weights=None and a fixed seed, exported to ONNX
// (opset 13, dynamic batch), loaded with LoadOnnxFile and served over 1 and 2 CPU slots,
// match PyTorch's outputs within 1e-4 relative L2 for batches 1, 3 and 16.
//
// The fixtures are generated at test time into REPLICAD_PARITY_FIXTURES (the build tree's
// parity_fixtures/; the script caches them by its own hash). Without torch, torchvision and
// onnx under /usr/bin/python3 every case is skipped with the reason
// (scripts/install-deps.sh installs them).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/npy.h"
#include "core/model/onnx_import.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/daemon_process.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr double kTolerance = 1e-4;

std::string FromEnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string FixturesDir() {
  return FromEnvOr("REPLICAD_PARITY_FIXTURES", REPLICAD_PARITY_FIXTURES_DEFAULT);
}

// The outcome of running the export script, once per process.
struct Fixtures {
  std::string skip_reason;  // Non-empty: torch is not available.
  int exit_code = 0;
  std::string output;
};

const Fixtures& ExportFixtures() {
  static const Fixtures* const fixtures = [] {
    auto* f = new Fixtures;
    const std::string python = FromEnvOr("REPLICAD_PARITY_PYTHON", "/usr/bin/python3");
    testing::CommandResult probe =
        testing::RunCommand({python, "-c", "import torch, torchvision, onnx, numpy"});
    if (probe.exit_code != 0) {
      f->skip_reason = absl::StrCat(python, " cannot import torch, torchvision, onnx and numpy",
                                    " (scripts/install-deps.sh installs python3-torch",
                                    " python3-torchvision python3-onnx): ", probe.out);
      return f;
    }
    std::cout << "export_torch_models.py -> " << FixturesDir() << std::endl;
    testing::CommandResult run =
        testing::RunCommand({python, REPLICAD_PARITY_SCRIPT, FixturesDir()});
    f->exit_code = run.exit_code;
    f->output = run.out;
    std::cout << run.out << std::flush;
    return f;
  }();
  return *fixtures;
}

absl::StatusOr<nlohmann::json> ReadManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  nlohmann::json manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded()) return absl::InvalidArgumentError(path + ": not valid JSON");
  return manifest;
}

absl::StatusOr<Tensor> ReadFloatNpy(const std::string& path) {
  absl::StatusOr<v1::Tensor> proto = client::ReadNpy(path);
  if (!proto.ok()) return proto.status();
  if (proto->dtype() != v1::DATA_TYPE_FLOAT32) {
    return absl::InvalidArgumentError(path + ": expected float32");
  }
  Tensor t = Tensor::Host(DType::kFloat32, Shape(proto->shape().begin(), proto->shape().end()));
  if (t.byte_size() != proto->raw().size()) {
    return absl::InvalidArgumentError(path + ": size does not match its shape");
  }
  std::copy(proto->raw().begin(), proto->raw().end(), static_cast<char*>(t.raw_data()));
  return t;
}

// "load failed: UNIMPLEMENTED (Clip, Concat)": the op types out of the importer's
// "unsupported operators: Clip (node '...'), Concat (node '...')" message.
std::string LoadFailure(const absl::Status& status) {
  const std::string message(status.message());
  std::set<std::string> ops;
  constexpr char kNode[] = " (node '";
  for (size_t at = message.find(kNode); at != std::string::npos && at > 0;
       at = message.find(kNode, at + 1)) {
    const size_t begin = message.rfind(' ', at - 1);
    if (begin != std::string::npos) ops.insert(message.substr(begin + 1, at - begin - 1));
  }
  std::string summary = absl::StrCat("load failed: ", absl::StatusCodeToString(status.code()));
  if (!ops.empty()) absl::StrAppend(&summary, " (", absl::StrJoin(ops, ", "), ")");
  return summary;
}

struct Row {
  std::string model;
  int64_t batch;
  int slots;
  std::string output;
  double relative_error;  // < 0: no result (the message says why).
  std::string message;
};

std::string FormatRow(const Row& r) {
  auto count = [](int64_t n) { return n > 0 ? absl::StrCat(n) : std::string("-"); };
  return absl::StrFormat(
      "| %-18s | %5s | %5s | %-16s | %s |", r.model, count(r.batch), count(r.slots), r.output,
      r.relative_error >= 0 ? absl::StrFormat("%.2e %s", r.relative_error,
                                              r.relative_error <= kTolerance ? "ok  " : "FAIL")
                            : r.message);
}

constexpr char kHeader[] =
    "| model              | batch | slots | output           | rel. L2 error |\n"
    "| ---                | ---:  | ---:  | ---              | ---           |";

// Every row of every model, printed again as one table when the run ends.
class ParityTable : public ::testing::Environment {
 public:
  static ParityTable* Get() {
    static ParityTable* const table = new ParityTable;
    return table;
  }
  void Add(Row row) {
    absl::MutexLock lock(&mu_);
    rows_.push_back(std::move(row));
  }
  void TearDown() override {
    absl::MutexLock lock(&mu_);
    if (rows_.empty()) return;
    std::cout << "\nPyTorch parity (tolerance " << kTolerance << " relative L2):\n"
              << kHeader << "\n";
    for (const Row& r : rows_) std::cout << FormatRow(r) << "\n";
    std::cout << std::flush;
  }

 private:
  absl::Mutex mu_;
  std::vector<Row> rows_ ABSL_GUARDED_BY(mu_);
};

class TorchParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void Report(Row row) {
    std::cout << FormatRow(row) << std::endl;
    ParityTable::Get()->Add(std::move(row));
  }
};

TEST_P(TorchParityTest, MatchesPyTorchOverOneAndTwoSlots) {
  const std::string name = GetParam();
  const Fixtures& fixtures = ExportFixtures();
  if (!fixtures.skip_reason.empty()) GTEST_SKIP() << fixtures.skip_reason;
  const std::string dir = FixturesDir() + "/" + name;
  absl::StatusOr<nlohmann::json> manifest = ReadManifest(dir + "/manifest.json");
  if (!manifest.ok()) {
    Report({name, 0, 0, "-", -1, "no fixtures: the export failed"});
    FAIL() << manifest.status() << "\nexport_torch_models.py exited " << fixtures.exit_code << ":\n"
           << fixtures.output;
  }

  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxFile(dir + "/" + manifest->at("model").get<std::string>(), name);
  if (!model.ok()) {
    Report({name, 0, 0, "-", -1, LoadFailure(model.status())});
    FAIL() << model.status();
  }

  // The manifest's order is torch's; the model's may differ. Map by name.
  std::vector<int> input_index, output_index;
  std::vector<std::string> output_names;
  for (const nlohmann::json& spec : manifest->at("inputs")) {
    input_index.push_back((*model)->InputIndex(spec.at("name").get<std::string>()));
    ASSERT_GE(input_index.back(), 0) << "model has no input " << spec.at("name");
  }
  for (const nlohmann::json& spec : manifest->at("outputs")) {
    output_names.push_back(spec.at("name").get<std::string>());
    output_index.push_back((*model)->OutputIndex(output_names.back()));
    ASSERT_GE(output_index.back(), 0) << "model has no output " << output_names.back();
  }
  ASSERT_EQ(input_index.size(), (*model)->inputs().size());
  ASSERT_EQ(output_index.size(), (*model)->outputs().size());

  std::cout << kHeader << std::endl;
  for (int slots : {1, 2}) {
    std::unique_ptr<ReplicaSet> set =
        testing::MakeCpuReplicaSet(*model, std::vector<double>(slots, 1.0));
    for (const nlohmann::json& entry : manifest->at("batches")) {
      const int64_t batch = entry.at("batch").get<int64_t>();
      std::vector<Tensor> inputs(input_index.size());
      for (size_t i = 0; i < input_index.size(); ++i) {
        absl::StatusOr<Tensor> t =
            ReadFloatNpy(dir + "/" + entry.at("inputs")[i].get<std::string>());
        ASSERT_TRUE(t.ok()) << t.status();
        inputs[input_index[i]] = *std::move(t);
      }
      testing::PredictOutcome outcome = testing::PredictAndWait(*set, std::move(inputs));
      if (!outcome.status.ok()) {
        Report({name, batch, slots, "-", -1,
                absl::StrCat("predict failed: ", absl::StatusCodeToString(outcome.status.code()))});
        ADD_FAILURE() << "batch " << batch << ", " << slots << " slots: " << outcome.status;
        continue;
      }
      EXPECT_EQ(outcome.slices.size(), static_cast<size_t>(std::min<int64_t>(slots, batch)));
      for (size_t j = 0; j < output_index.size(); ++j) {
        absl::StatusOr<Tensor> expected =
            ReadFloatNpy(dir + "/" + entry.at("outputs")[j].get<std::string>());
        ASSERT_TRUE(expected.ok()) << expected.status();
        const Tensor& actual = outcome.outputs[output_index[j]];
        if (actual.shape() != expected->shape()) {
          Report({name, batch, slots, output_names[j], -1,
                  absl::StrCat("shape ", ShapeToString(actual.shape()), " != torch's ",
                               ShapeToString(expected->shape()))});
          ADD_FAILURE() << output_names[j] << ": shape " << ShapeToString(actual.shape())
                        << ", torch " << ShapeToString(expected->shape());
          continue;
        }
        const double error = testing::RelativeL2(actual, *expected);
        Report({name, batch, slots, output_names[j], error, ""});
        EXPECT_LE(error, kTolerance) << name << " output " << output_names[j] << " batch " << batch
                                     << ", " << slots << " slots";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TorchParityTest,
                         ::testing::Values("resnet18", "mobilenet_v2", "squeezenet1_1",
                                           "densenet121", "efficientnet_b0", "shufflenet_v2_x0_5",
                                           "mnasnet0_75", "convnext_blocks", "xception_separable",
                                           "siamese_pair", "small_cnn"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

[[maybe_unused]] ::testing::Environment* const kParityTable =
    ::testing::AddGlobalTestEnvironment(ParityTable::Get());

}  // namespace
}  // namespace replicad
