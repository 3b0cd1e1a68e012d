#include "server/inference_protocol.h"

#include <limits>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/client_text.h"
#include "core/base/status_macros.h"
#include "core/model/compute_precision.h"
#include "google/protobuf/text_format.h"
#include "server/model_config_file.h"

namespace replicad {

std::vector<std::string> SupportedExtensions(const SharedMemoryRegistry* shared_memory) {
  std::vector<std::string> extensions = {"binary_tensor_data", "model_configuration",
                                         "model_repository", "statistics"};
  if (shared_memory != nullptr) extensions.push_back("system_shared_memory");
  if (shared_memory != nullptr && shared_memory->cuda_enabled()) {
    extensions.push_back("cuda_shared_memory");
  }
  return extensions;
}

const char* DatatypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "FP32";
    case DType::kUint8:
      return "UINT8";
    case DType::kInt8:
      return "INT8";
    case DType::kInt32:
      return "INT32";
    case DType::kInt64:
      return "INT64";
    case DType::kBool:
      return "BOOL";
    case DType::kFloat16:
      return "FP16";
    case DType::kBFloat16:
      return "BF16";
  }
  return "INVALID";
}

absl::StatusOr<DType> DTypeFromDatatype(const std::string& datatype, const std::string& field) {
  for (DType dtype : kAllDTypes) {
    if (datatype == DatatypeOf(dtype)) return dtype;
  }
  // No model replicad loads holds another type, so another is never the model's.
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": expected datatype FP32, FP16, BF16, INT64, INT32, INT8, UINT8 or BOOL, received '",
      ClientText(datatype), "'"));
}

absl::StatusOr<int64_t> ParseModelVersion(const std::string& version, const std::string& field) {
  if (version.empty()) return 0;
  int64_t number = 0;
  if (!absl::SimpleAtoi(version, &number) || number <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected a positive integer, or empty for the latest; received '", version, "'"));
  }
  return number;
}

namespace {

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
  // A version loaded with a config.pbtxt reports it (as checked and resolved
  // at load); what it leaves out is completed from the model, as Triton's
  // auto-complete does.
  const bool from_file = !model.config_text.empty() &&
                         google::protobuf::TextFormat::ParseFromString(model.config_text, out);
  if (!from_file) out->Clear();
  out->set_name(model.name);
  out->set_platform("onnxruntime_onnx");
  out->set_backend("onnxruntime");
  if (!out->has_version_policy()) {
    out->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  const int64_t max_batch = from_file ? out->max_batch_size() : ConfigMaxBatchSize(model);
  out->set_max_batch_size(static_cast<int32_t>(max_batch));
  auto complete = [max_batch](const std::vector<TensorSpec>& specs, auto* tensors) {
    for (const TensorSpec& s : specs) {
      auto listed = std::find_if(tensors->begin(), tensors->end(),
                                 [&s](const auto& t) { return t.name() == s.name; });
      const bool in_file = listed != tensors->end();
      auto* tensor = in_file ? &*listed : tensors->Add();
      if (!in_file) {
        tensor->set_name(s.name);
        for (int64_t d : ConfigDims(s, max_batch > 0)) tensor->add_dims(d);
      }
      if (tensor->data_type() == inference::TYPE_INVALID) {
        tensor->set_data_type(ConfigDataType(s.type.dtype));
      }
    }
  };
  complete(model.model().inputs(), out->mutable_input());
  complete(model.model().outputs(), out->mutable_output());
  // The precision it computes in, as the parameter a config.pbtxt sets it with.
  (*out->mutable_parameters())["precision"].set_string_value(
      std::string(ComputePrecisionName(MarkedComputePrecision(model.model().graph()))));
  if (out->instance_group_size() > 0) return;
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

absl::StatusOr<SharedMemoryRegistry*> SystemSharedMemory(SharedMemoryRegistry* registry) {
  if (registry == nullptr) {
    return absl::UnimplementedError(
        "system shared memory is disabled on this server (--system-shared-memory=false)");
  }
  return registry;
}

absl::Status FillSharedMemoryStatus(const SharedMemoryRegistry& registry, const std::string& name,
                                    inference::SystemSharedMemoryStatusResponse* out) {
  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> regions = registry.Status(name);
  if (!regions.ok()) return regions.status();
  for (const SharedMemoryRegistry::RegionStatus& region : *regions) {
    inference::SystemSharedMemoryStatusResponse::RegionStatus& status =
        (*out->mutable_regions())[region.name];
    status.set_name(region.name);
    status.set_key(region.key);
    status.set_offset(region.offset);
    status.set_byte_size(region.byte_size);
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedMemoryRegistry*> CudaSharedMemory(SharedMemoryRegistry* registry) {
  if (registry == nullptr) {
    return absl::UnimplementedError(
        "CUDA shared memory is disabled on this server (--system-shared-memory=false turns off "
        "both shared-memory extensions)");
  }
  if (!registry->cuda_enabled()) {
    return absl::UnimplementedError(
        "CUDA shared memory: this replicad was built without CUDA (REPLICAD_WITH_CUDA)");
  }
  return registry;
}

absl::Status FillCudaSharedMemoryStatus(const SharedMemoryRegistry& registry,
                                        const std::string& name,
                                        inference::CudaSharedMemoryStatusResponse* out) {
  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> regions =
      registry.Status(name, SharedMemoryKind::kCuda);
  if (!regions.ok()) return regions.status();
  for (const SharedMemoryRegistry::RegionStatus& region : *regions) {
    inference::CudaSharedMemoryStatusResponse::RegionStatus& status =
        (*out->mutable_regions())[region.name];
    status.set_name(region.name);
    status.set_device_id(static_cast<uint64_t>(region.device_id));
    status.set_byte_size(region.byte_size);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<LoadedModel>> FindModelVersion(const ServingCore& core,
                                                              const std::string& name,
                                                              const std::string& version) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t number, ParseModelVersion(version, "version"));
  return core.FindModel(name, number, "name");
}

absl::StatusOr<std::shared_ptr<LoadedModel>> AnswerModelMetadata(
    ServingCore& core, const std::string& name, const std::string& version,
    inference::ModelMetadataResponse* out) {
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = FindModelVersion(core, name, version);
  if (!model.ok()) return model.status();
  std::vector<std::shared_ptr<LoadedModel>> versions;
  for (auto& v : core.models().Ready()) {
    if (v->name == (*model)->name) versions.push_back(std::move(v));
  }
  FillModelMetadata(versions, **model, out);
  return model;
}

absl::StatusOr<std::shared_ptr<LoadedModel>> AnswerModelConfig(const ServingCore& core,
                                                               const std::string& name,
                                                               const std::string& version,
                                                               inference::ModelConfig* out) {
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = FindModelVersion(core, name, version);
  if (!model.ok()) return model.status();
  FillModelConfig(**model, out);
  return model;
}

absl::StatusOr<std::shared_ptr<LoadedModel>> AnswerModelStatistics(
    ServingCore& core, const std::string& name, const std::string& version,
    inference::ModelStatisticsResponse* out) {
  if (name.empty()) {
    for (const auto& model : core.models().Ready()) {
      FillModelStatistics(*model, out->add_model_stats());
    }
    return std::shared_ptr<LoadedModel>();
  }
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = FindModelVersion(core, name, version);
  if (!model.ok()) return model.status();
  FillModelStatistics(**model, out->add_model_stats());
  return model;
}

void AnswerServerMetadata(const SharedMemoryRegistry* shared_memory,
                          inference::ServerMetadataResponse* out) {
  out->set_name(kServerName);
  out->set_version(kServerVersion);
  for (const std::string& e : SupportedExtensions(shared_memory)) out->add_extensions(e);
}

absl::StatusOr<ModelUpload> UploadOfParameters(
    const std::string& model,
    const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& parameters) {
  ModelUpload upload;
  upload.model = model;
  for (const auto& [name, value] : parameters) {
    const std::string field = absl::StrCat("parameters.", name);
    if (name == "config") {
      if (value.parameter_choice_case() != inference::ModelRepositoryParameter::kStringParam) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": expected a string_param holding the configuration's JSON"));
      }
      upload.config_json = value.string_param();
    } else if (absl::StartsWith(name, "file:")) {
      if (value.parameter_choice_case() != inference::ModelRepositoryParameter::kBytesParam) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": expected a bytes_param holding the file's contents"));
      }
      upload.files.push_back({name.substr(5), value.bytes_param(), field});
    }
  }
  return upload;
}

}  // namespace replicad
