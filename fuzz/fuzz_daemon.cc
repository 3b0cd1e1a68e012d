#include "fuzz/fuzz_daemon.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/model/onnx_builder.h"
#include "core/serve/retirer.h"
#include "server/local_model_repository.h"

namespace replicad::fuzz {
namespace {

[[noreturn]] void Die(const absl::Status& status, absl::string_view step) {
  Violated(absl::StrCat("fuzz daemon: ", step, ": ", status.ToString()));
}

Tensor Filled(Shape shape, float start) {
  Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
  float* data = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) data[i] = start + 0.125f * static_cast<float>(i);
  return t;
}

}  // namespace

std::string TinyModelOnnx() {
  OnnxModelBuilder b("replicad_fuzz", 13);
  b.AddInitializer("W", Filled({3, 4}, -0.5f));
  b.AddInitializer("b", Filled({3}, 0.25f));
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"x", "W", "b"}, {"gemm"}), "transB", 1);
  b.AddNode("Add", {"gemm", "offset"}, {"logits"});
  OnnxModelBuilder::SetInt(b.AddNode("Softmax", {"logits"}, {"probabilities"}), "axis", 1);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddInput("offset", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("probabilities", DType::kFloat32, {kAnyDim, 3});
  return b.Serialize();
}

namespace {

// The model file, in a directory of its own that outlives the process
// (libFuzzer's exit runs no cleanup; scripts/fuzz.sh removes it).
std::string WriteModelFile() {
  const std::string path = absl::StrCat(NewTempDirectory("replicad-fuzz-model"), "/model.onnx");
  std::ofstream out(path, std::ios::binary);
  out << TinyModelOnnx();
  out.close();
  if (!out) Die(absl::InternalError(path), "writing the model");
  return path;
}

}  // namespace

FuzzDaemon& FuzzDaemon::Get() {
  static FuzzDaemon* daemon = new FuzzDaemon();
  return *daemon;
}

FuzzDaemon::FuzzDaemon() {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) Die(devices.status(), "devices");
  devices_ = *std::move(devices);
  // Two one-thread CPU slots on whatever the machine has: batches split.
  const std::vector<DeviceId> cpu = DefaultSlots(devices_, 1);
  ServingOptions serving;
  serving.slots = {{"r0", cpu.front(), 1.0}, {"r1", cpu.back(), 1.0}};
  serving.merge_device = cpu.front();

  registry_ = std::make_unique<metrics::Registry>();
  metrics_ = std::make_unique<ServerMetrics>(*registry_);
  retirer_ = std::make_unique<Retirer>();
  LocalModelRepository::Config config;
  config.fixed = {ModelSource{kModelName, WriteModelFile(), 1, ""}};
  config.devices = devices_;
  config.options = serving;
  config.metrics = metrics_.get();
  config.retirer = retirer_.get();
  models_ =
      std::make_unique<ModelManager>(std::make_unique<LocalModelRepository>(config), *retirer_);
  if (absl::Status s = models_->LoadAll(); !s.ok()) Die(s, "loading the model");
  ServingCore::Options core_options;
  core_options.observer = metrics_.get();
  core_ = std::make_unique<ServingCore>(*models_, core_options);
  shared_memory_ = std::make_unique<SharedMemoryRegistry>();
}

bool IsRequestError(int code) {
  switch (static_cast<absl::StatusCode>(code)) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return false;
    default:
      return true;
  }
}

void CheckRefusal(const grpc::Status& status, const char* rpc) {
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      status.error_message() == "Deadline Exceeded") {
    Violated(absl::StrCat(rpc, " did not answer within 10 s"));
  }
  if (!IsRequestError(status.error_code())) {
    Violated(
        absl::StrCat(rpc, " failed with code ", status.error_code(), ": ", status.error_message()));
  }
  if (status.error_message().size() > kMaxRefusalMessage) {
    Violated(absl::StrCat(rpc, " error message of ", status.error_message().size(), " bytes"));
  }
}

}  // namespace replicad::fuzz
