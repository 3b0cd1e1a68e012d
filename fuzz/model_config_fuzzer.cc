// Feeds bytes as a model's config.pbtxt (Triton's ModelConfig in protobuf
// text format) to ReadModelConfig, then puts an accepted configuration
// through what loading does with it: SchedulerOptionsOf, SelectVersions,
// InstanceGroupSlots (on a CPU-only machine and on one with two GPUs) and
// ApplyTensorConfig against the fuzz model (fuzz_daemon.h).
// Asserts: every refusal is InvalidArgument; an accepted configuration
// prints and reads back to the same message (a round trip through the
// text format); SchedulerOptionsOf accepts it; versions chosen are
// ascending, unique and among those available; InstanceGroupSlots gives one
// slot per instance its rewritten groups describe; a model ApplyTensorConfig
// gives keeps the model's input and output names and dtypes.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/onnx_import.h"
#include "fuzz/fuzz_daemon.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/model_config_file.h"

namespace replicad::fuzz {
namespace {

const std::string& ConfigPath() {
  static const std::string* path =
      new std::string(absl::StrCat(NewTempDirectory("replicad-config-fuzz"), "/config.pbtxt"));
  return *path;
}

void WriteConfig(const std::string& text) {
  std::ofstream out(ConfigPath(), std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) Violated("cannot write the configuration");
}

std::shared_ptr<const Model> TheModel() {
  static const auto* model = [] {
    absl::StatusOr<std::shared_ptr<const Model>> loaded =
        LoadOnnxBytes(TinyModelOnnx(), FuzzDaemon::kModelName, "<fuzz>");
    if (!loaded.ok()) Violated(loaded.status().ToString());
    return new std::shared_ptr<const Model>(*loaded);
  }();
  return *model;
}

void ExpectInvalidArgument(const absl::Status& status, const char* step) {
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) {
    Violated(absl::StrCat(step, " failed with ", status.ToString()));
  }
}

void CheckSlots(const std::vector<DeviceInfo>& devices, inference::ModelConfig config) {
  absl::StatusOr<std::vector<SlotAssignment>> slots = InstanceGroupSlots(devices, 1, &config);
  ExpectInvalidArgument(slots.status(), "InstanceGroupSlots");
  if (!slots.ok()) return;
  size_t instances = 0;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.count() < 1) Violated("a group rewritten with count < 1");
    const size_t places =
        group.kind() == inference::ModelInstanceGroup::KIND_GPU ? group.gpus_size() : 1;
    instances += static_cast<size_t>(group.count()) * places;
  }
  if (slots->size() != instances) {
    Violated(absl::StrCat(slots->size(), " slots for ", instances, " instances"));
  }
}

void CheckVersions(const inference::ModelConfig& config) {
  const std::vector<int64_t> available = {3, 1, 2, 7};
  absl::StatusOr<std::vector<int64_t>> versions =
      SelectVersions(config.version_policy(), available);
  ExpectInvalidArgument(versions.status(), "SelectVersions");
  if (!versions.ok()) return;
  for (size_t i = 0; i < versions->size(); ++i) {
    const int64_t v = (*versions)[i];
    if (v != 1 && v != 2 && v != 3 && v != 7) Violated(absl::StrCat("chose version ", v));
    if (i > 0 && (*versions)[i - 1] >= v) Violated("versions not ascending and unique");
  }
}

void CheckTensors(const inference::ModelConfig& config) {
  const std::shared_ptr<const Model> model = TheModel();
  absl::StatusOr<std::shared_ptr<const Model>> applied = ApplyTensorConfig(model, config);
  ExpectInvalidArgument(applied.status(), "ApplyTensorConfig");
  if (!applied.ok()) return;
  for (const bool inputs : {true, false}) {
    const auto& before = inputs ? model->inputs() : model->outputs();
    const auto& after = inputs ? (*applied)->inputs() : (*applied)->outputs();
    if (before.size() != after.size()) Violated("ApplyTensorConfig changed the tensor count");
    for (size_t i = 0; i < before.size(); ++i) {
      if (before[i].name != after[i].name || before[i].type.dtype != after[i].type.dtype ||
          before[i].type.shape.size() != after[i].type.shape.size()) {
        Violated(absl::StrCat("ApplyTensorConfig changed '", before[i].name, "'"));
      }
    }
  }
}

}  // namespace
}  // namespace replicad::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad;
  using namespace replicad::fuzz;
  WriteConfig(std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<inference::ModelConfig> config = ReadModelConfig(ConfigPath(), "fuzz");
  ExpectInvalidArgument(config.status(), "ReadModelConfig");
  if (!config.ok()) return 0;

  std::string printed;
  if (!google::protobuf::TextFormat::PrintToString(*config, &printed)) Violated("cannot print");
  WriteConfig(printed);
  absl::StatusOr<inference::ModelConfig> again = ReadModelConfig(ConfigPath(), "fuzz");
  if (!again.ok()) {
    Violated(absl::StrCat("the printed configuration is refused: ", again.status().ToString(), "\n",
                          printed));
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(*config, *again)) {
    Violated(absl::StrCat("print -> read changed the configuration:\n", printed));
  }

  if (!SchedulerOptionsOf(*config, SchedulerOptions()).ok()) {
    Violated("SchedulerOptionsOf refuses what ReadModelConfig accepted");
  }
  CheckVersions(*config);
  auto device = [](DeviceKind kind, int ordinal) {
    DeviceInfo info;
    info.id = DeviceId{kind, ordinal};
    return info;
  };
  const DeviceInfo cpu0 = device(DeviceKind::kCpu, 0), cpu1 = device(DeviceKind::kCpu, 1);
  const DeviceInfo gpu0 = device(DeviceKind::kCuda, 0), gpu1 = device(DeviceKind::kCuda, 1);
  CheckSlots({cpu0, cpu1}, *config);
  CheckSlots({cpu0, cpu1, gpu0, gpu1}, *config);
  CheckTensors(*config);
  return 0;
}
