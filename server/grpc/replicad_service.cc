#include "server/grpc/replicad_service.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "core/base/client_text.h"
#include "core/base/status_macros.h"
#include "core/model/compute_precision.h"
#include "server/grpc/call_context.h"
#include "server/grpc/model_download.h"
#include "server/grpc/train_steps_call.h"
#include "server/grpc/unary_call.h"
#include "server/grpc/v1_messages.h"
#include "server/grpc/wire_request.h"
#include "server/grpc/wire_response.h"
#include "server/training_config_proto.h"

namespace replicad {
namespace {

v1::DataType EncodeDType(DType dtype) { return static_cast<v1::DataType>(dtype); }

void FillSpec(const TensorSpec& spec, v1::TensorSpec* out) {
  out->set_name(spec.name);
  out->set_dtype(EncodeDType(spec.type.dtype));
  for (int64_t d : spec.type.shape) out->add_shape(d);
}

// Has the requested outputs written into pooled buffers (not zero-filled
// first), which the response then borrows.
class PooledTensors : public ResponseWriter {
 public:
  explicit PooledTensors(std::shared_ptr<HostBufferPool> pool) : pool_(std::move(pool)) {}

  absl::StatusOr<void*> AddOutput(const TensorSpec& spec, const TensorType& type) override {
    absl::StatusOr<std::shared_ptr<HostBuffer>> buffer = pool_->Get(ByteSize(type));
    if (!buffer.ok()) return buffer.status();
    v1::Tensor* tensor = head_.add_outputs();
    tensor->set_name(spec.name);
    tensor->set_dtype(EncodeDType(type.dtype));
    for (int64_t d : type.shape) tensor->add_shape(d);
    raw_.push_back(*std::move(buffer));
    return static_cast<void*>(raw_.back()->data());
  }

  // The response: `answer`'s model and slices, and the outputs.
  grpc::ByteBuffer Encode(const ServingCore::InferAnswer& answer) {
    head_.set_model(answer.model->name);
    for (const SliceReport& slice : answer.slices) {
      v1::SliceInfo* info = head_.add_slices();
      info->set_slot(slice.slot);
      info->set_device(slice.device);
      info->set_begin(slice.begin);
      info->set_end(slice.end);
    }
    return EncodePredictResponse(head_, raw_);
  }

 private:
  const std::shared_ptr<HostBufferPool> pool_;
  v1::PredictResponse head_;  // Without the outputs' bytes: raw_[i] holds outputs(i)'s.
  std::vector<std::shared_ptr<HostBuffer>> raw_;
};

}  // namespace

ReplicadService::ReplicadService(ServingCore& core, std::vector<DeviceInfo> devices,
                                 ServerMetrics& metrics, const AccessTokens* tokens,
                                 std::shared_ptr<HostBufferPool> buffers, ModelUploads* uploads)
    : core_(core),
      devices_(std::move(devices)),
      metrics_(metrics),
      tokens_(tokens),
      buffers_(buffers != nullptr
                   ? std::move(buffers)
                   : std::make_shared<HostBufferPool>(HostBufferPool::kDefaultIdleBytes)),
      uploads_(uploads) {}

grpc::ServerUnaryReactor* ReplicadService::Predict(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* wire,
                                                   grpc::ByteBuffer* response) {
  UnaryCall call(context, metrics_, "Predict", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<WirePredictRequest> request = ReadPredictRequest(*wire, *buffers_);
  if (!request.ok()) return call.Finish(request.status());
  absl::StatusOr<std::vector<RequestInput>> inputs =
      DecodeInputs(request->message.inputs(), request->raw);
  if (!inputs.ok()) return call.Finish(inputs.status());
  InferRequest infer;
  infer.model = request->message.model();
  infer.inputs = *std::move(inputs);
  infer.outputs.assign(request->message.output_names().begin(),
                       request->message.output_names().end());
  auto writer = std::make_shared<PooledTensors>(buffers_);
  // The inputs view the request's buffers: they go with the done callback.
  core_.Infer(std::move(infer), ContextOf(context), writer.get(),
              [call, writer, request = *std::move(request), response](
                  absl::Status status, ServingCore::InferAnswer answer) mutable {
                if (status.ok()) *response = writer->Encode(answer);
                call.Finish(status, answer.model != nullptr ? answer.model->name : "");
              });
  return call.reactor();
}

grpc::ServerUnaryReactor* ReplicadService::ListDevices(grpc::CallbackServerContext* context,
                                                       const v1::ListDevicesRequest*,
                                                       v1::ListDevicesResponse* response) {
  UnaryCall call(context, metrics_, "ListDevices", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  std::map<std::string, int> slots;
  for (const auto& model : core_.models().Ready()) {
    for (const SlotStatus& slot : model->servable->Slots()) ++slots[slot.device];
  }
  for (const DeviceInfo& d : devices_) {
    v1::DeviceInfo* out = response->add_devices();
    out->set_id(DeviceIdToString(d.id));
    out->set_kind(d.id.kind == DeviceKind::kCpu ? "cpu" : "cuda");
    out->set_name(d.name);
    out->set_memory_bytes(d.memory_bytes);
    out->set_compute_capability(d.compute_capability);
    out->set_driver_version(d.driver_version);
    out->set_runtime_version(d.runtime_version);
    out->set_slots(slots[DeviceIdToString(d.id)]);
  }
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* ReplicadService::ListModels(grpc::CallbackServerContext* context,
                                                      const v1::ListModelsRequest*,
                                                      v1::ListModelsResponse* response) {
  UnaryCall call(context, metrics_, "ListModels", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  for (const auto& model : core_.models().Ready()) {
    v1::ModelSummary* out = response->add_models();
    out->set_name(model->name);
    out->set_path(model->source);
  }
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* ReplicadService::GetModel(grpc::CallbackServerContext* context,
                                                    const v1::GetModelRequest* request,
                                                    v1::GetModelResponse* response) {
  UnaryCall call(context, metrics_, "GetModel", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<std::shared_ptr<LoadedModel>> found = core_.FindModel(request->name(), 0, "name");
  if (!found.ok()) return call.Finish(found.status());
  const LoadedModel& model = **found;
  v1::ModelInfo* info = response->mutable_model();
  info->set_name(model.name);
  info->set_path(model.source);
  info->set_opset(model.model().graph().opset);
  for (const TensorSpec& s : model.model().inputs()) FillSpec(s, info->add_inputs());
  for (const TensorSpec& s : model.model().outputs()) FillSpec(s, info->add_outputs());
  for (const SlotStatus& slot : model.servable->Slots()) {
    v1::ReplicaInfo* r = info->add_replicas();
    r->set_slot(slot.slot);
    r->set_device(slot.device);
    r->set_weight(slot.weight);
    r->set_healthy(slot.health.ok());
    r->set_fault(std::string(slot.health.message()));
  }
  info->set_ready(core_.ModelReady(model.name, model.version).ok());
  info->set_merge_device(model.servable->MergeDevice());
  info->set_max_batch_size(model.max_batch_size);
  info->set_precision(
      std::string(ComputePrecisionName(MarkedComputePrecision(model.model().graph()))));
  return call.Finish(absl::OkStatus(), model.name);
}

grpc::ServerUnaryReactor* ReplicadService::ConfigureTraining(
    grpc::CallbackServerContext* context, const v1::ConfigureTrainingRequest* request,
    v1::ConfigureTrainingResponse* response) {
  UnaryCall call(context, metrics_, "ConfigureTraining", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<TrainingConfig> config = TrainingConfigFromProto(request->config());
  if (!config.ok()) return call.Finish(config.status());
  core_.ConfigureTraining(request->model(), *std::move(config),
                          [call, response](absl::StatusOr<TrainingConfig> applied, int64_t step,
                                           std::shared_ptr<LoadedModel> model) mutable {
                            if (applied.ok()) {
                              *response->mutable_config() = TrainingConfigToProto(*applied);
                              response->set_step(step);
                            }
                            call.Finish(applied.status(), model != nullptr ? model->name : "");
                          });
  return call.reactor();
}

grpc::ServerUnaryReactor* ReplicadService::TrainStep(grpc::CallbackServerContext* context,
                                                     const v1::TrainStepRequest* request,
                                                     v1::TrainStepResponse* response) {
  UnaryCall call(context, metrics_, "TrainStep", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<TrainRequest> train = TrainRequestOf(*request);
  if (!train.ok()) return call.Finish(train.status());
  core_.TrainStep(*std::move(train), ContextOf(context),
                  [call, response](absl::StatusOr<DataParallelTrainer::StepResult> step,
                                   std::shared_ptr<LoadedModel> model) mutable {
                    const std::string name = model != nullptr ? model->name : "";
                    if (!step.ok()) {
                      call.Finish(step.status(), name);
                      return;
                    }
                    FillTrainStepResponse(*step, *model, response);
                    call.Finish(absl::OkStatus(), name);
                  });
  return call.reactor();
}

grpc::ServerUnaryReactor* ReplicadService::SaveCheckpoint(grpc::CallbackServerContext* context,
                                                          const v1::SaveCheckpointRequest* request,
                                                          v1::SaveCheckpointResponse* response) {
  UnaryCall call(context, metrics_, "SaveCheckpoint", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  core_.SaveCheckpoint(request->model(), request->path(),
                       [call, response](absl::StatusOr<TrainingSession::Saved> saved,
                                        std::shared_ptr<LoadedModel> model) mutable {
                         if (saved.ok()) {
                           response->set_path(saved->path);
                           response->set_step(saved->step);
                         }
                         call.Finish(saved.status(), model != nullptr ? model->name : "");
                       });
  return call.reactor();
}

grpc::ServerUnaryReactor* ReplicadService::LoadModel(grpc::CallbackServerContext* context,
                                                     const v1::LoadModelRequest* request,
                                                     v1::LoadModelResponse*) {
  UnaryCall call(context, metrics_, "LoadModel", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  ModelUpload upload;
  upload.model = request->model();
  upload.config_json = request->config();
  upload.config_field = "config";
  for (const auto& [path, bytes] : request->files()) {
    upload.files.push_back({path, bytes, absl::StrCat("files['", ClientText(path), "']")});
  }
  LoadModelOrUpload(core_, uploads_, std::move(upload),
                    [call](absl::Status status) mutable { call.Finish(status); });
  return call.reactor();
}

grpc::ServerUnaryReactor* ReplicadService::UnloadModel(grpc::CallbackServerContext* context,
                                                       const v1::UnloadModelRequest* request,
                                                       v1::UnloadModelResponse*) {
  UnaryCall call(context, metrics_, "UnloadModel", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  UnloadModelAndUpload(core_, uploads_, request->model(), request->remove_upload(),
                       [call](absl::Status status) mutable { call.Finish(status); });
  return call.reactor();
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ReplicadService::TrainSteps(
    grpc::CallbackServerContext* context) {
  return StartTrainSteps(context, core_, metrics_, tokens_);
}

grpc::ServerWriteReactor<v1::ModelChunk>* ReplicadService::DownloadModel(
    grpc::CallbackServerContext* context, const v1::DownloadModelRequest* request) {
  return StartModelDownload(context, core_, metrics_, tokens_, *request);
}

}  // namespace replicad
