#include "server/inference_protocol.h"

#include <limits>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace replicad {

std::vector<std::string> SupportedExtensions() {
  return {"model_configuration", "model_repository", "statistics"};
}

absl::StatusOr<DType> DTypeFromDatatype(const std::string& datatype, const std::string& field) {
  if (datatype == "FP32") return DType::kFloat32;
  if (datatype == "INT64") return DType::kInt64;
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": expected datatype FP32 or INT64, received '", datatype, "'"));
}

const char* DatatypeOf(DType dtype) { return dtype == DType::kFloat32 ? "FP32" : "INT64"; }

absl::StatusOr<int64_t> ParseModelVersion(const std::string& version, const std::string& field) {
  if (version.empty()) return 0;
  int64_t number = 0;
  if (!absl::SimpleAtoi(version, &number) || number <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected a positive integer, or empty for the latest; received '", version,
        "'"));
  }
  return number;
}

namespace {

inference::DataType ConfigTypeOf(DType dtype) {
  return dtype == DType::kFloat32 ? inference::TYPE_FP32 : inference::TYPE_INT64;
}

// Every dynamic dim prints as -1, the batch dim first among them.
void FillTensorMetadata(const TensorSpec& spec,
                        inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(spec.name);
  out->set_datatype(DatatypeOf(spec.type.dtype));
  for (int64_t d : spec.type.shape) out->add_shape(d < 0 ? -1 : d);
}

// Triton's max_batch_size for a model whose inputs all batch in dim 0: our
// limit, or the largest int32 for none. 0 (no batching) when an input's
// dim 0 is fixed.
int64_t ConfigMaxBatchSize(const LoadedModel& model) {
  for (const TensorSpec& s : model.model().inputs()) {
    if (s.type.shape.empty() || s.type.shape[0] >= 0) return 0;
  }
  return model.max_batch_size > 0 ? model.max_batch_size : std::numeric_limits<int32_t>::max();
}

}  // namespace

void FillModelMetadata(const std::vector<std::shared_ptr<LoadedModel>>& versions,
                       const LoadedModel& model, inference::ModelMetadataResponse* out) {
  out->set_name(model.name);
  for (const auto& v : versions) out->add_versions(absl::StrCat(v->version));
  out->set_platform("onnxruntime_onnx");
  for (const TensorSpec& s : model.model().inputs()) FillTensorMetadata(s, out->add_inputs());
  for (const TensorSpec& s : model.model().outputs()) FillTensorMetadata(s, out->add_outputs());
}

void FillModelConfig(const LoadedModel& model, inference::ModelConfig* out) {
  out->set_name(model.name);
  out->set_platform("onnxruntime_onnx");
  out->set_backend("onnxruntime");
  out->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  const int64_t max_batch = ConfigMaxBatchSize(model);
  out->set_max_batch_size(static_cast<int32_t>(max_batch));
  auto dims = [max_batch](const TensorSpec& s, auto* tensor) {
    tensor->set_name(s.name);
    tensor->set_data_type(ConfigTypeOf(s.type.dtype));
    for (size_t i = max_batch > 0 ? 1 : 0; i < s.type.shape.size(); ++i) {
      tensor->add_dims(s.type.shape[i] < 0 ? -1 : s.type.shape[i]);
    }
  };
  for (const TensorSpec& s : model.model().inputs()) dims(s, out->add_input());
  for (const TensorSpec& s : model.model().outputs()) dims(s, out->add_output());
  std::map<std::string, int> slots_per_device;
  for (const SlotStatus& slot : model.servable->Slots()) ++slots_per_device[slot.device];
  for (const auto& [device, count] : slots_per_device) {
    inference::ModelInstanceGroup* group = out->add_instance_group();
    group->set_name(absl::StrCat(model.name, "_", device));
    group->set_count(count);
    const bool gpu = device.rfind("cuda:", 0) == 0;
    group->set_kind(gpu ? inference::ModelInstanceGroup::KIND_GPU
                        : inference::ModelInstanceGroup::KIND_CPU);
    int id = 0;
    if (gpu && absl::SimpleAtoi(device.substr(5), &id)) group->add_gpus(id);
  }
}

void FillModelStatistics(const LoadedModel& model, inference::ModelStatistics* out) {
  const ModelStatisticsSnapshot s = model.statistics->Snapshot();
  auto fill = [](const DurationStat& from, inference::StatisticDuration* to) {
    to->set_count(from.count);
    to->set_ns(from.ns);
  };
  out->set_name(model.name);
  out->set_version(absl::StrCat(model.version));
  out->set_last_inference(static_cast<uint64_t>(s.last_inference_ms));
  out->set_inference_count(s.inference_count);
  out->set_execution_count(s.execution_count);
  inference::InferStatistics* stats = out->mutable_inference_stats();
  fill(s.success, stats->mutable_success());
  fill(s.fail, stats->mutable_fail());
  fill(s.queue, stats->mutable_queue());
  fill(s.compute_input, stats->mutable_compute_input());
  fill(s.compute_infer, stats->mutable_compute_infer());
  fill(s.compute_output, stats->mutable_compute_output());
  stats->mutable_cache_hit();
  stats->mutable_cache_miss();
  for (const auto& [size, batch] : s.batches) {
    inference::InferBatchStatistics* b = out->add_batch_stats();
    b->set_batch_size(static_cast<uint64_t>(size));
    fill(batch.compute_input, b->mutable_compute_input());
    fill(batch.compute_infer, b->mutable_compute_infer());
    fill(batch.compute_output, b->mutable_compute_output());
  }
}

void FillRepositoryIndex(const std::vector<ModelIndexEntry>& index, bool ready_only,
                         inference::RepositoryIndexResponse* out) {
  for (const ModelIndexEntry& e : index) {
    if (ready_only && e.state != ModelState::kReady) continue;
    inference::RepositoryIndexResponse::ModelIndex* m = out->add_models();
    m->set_name(e.name);
    if (e.version > 0) m->set_version(absl::StrCat(e.version));
    m->set_state(ModelStateName(e.state));
    m->set_reason(e.reason);
  }
}

}  // namespace replicad
