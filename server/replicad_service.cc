#include "server/replicad_service.h"

#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/serve/request_validation.h"
#include "server/grpc_status.h"

namespace replicad {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::StatusOr<DType> DecodeDType(int value, const std::string& field) {
  switch (value) {
    case v1::DATA_TYPE_FLOAT32:
      return DType::kFloat32;
    case v1::DATA_TYPE_INT64:
      return DType::kInt64;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".dtype: expected DATA_TYPE_FLOAT32 or DATA_TYPE_INT64, received ",
          v1::DataType_IsValid(value) ? v1::DataType_Name(value) : std::string("unknown"), " (",
          value, ")"));
  }
}

// A request tensor's dtype, shape and bytes (not yet checked against anything).
absl::StatusOr<RequestInput> DecodeTensor(const v1::Tensor& t, const std::string& field) {
  absl::StatusOr<DType> dtype = DecodeDType(t.dtype(), field);
  if (!dtype.ok()) return dtype.status();
  return RequestInput{t.name(), *dtype, Shape(t.shape().begin(), t.shape().end()), t.raw().data(),
                      t.raw().size()};
}

absl::StatusOr<std::vector<RequestInput>> DecodeInputs(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors) {
  std::vector<RequestInput> inputs;
  inputs.reserve(tensors.size());
  for (int i = 0; i < tensors.size(); ++i) {
    absl::StatusOr<RequestInput> input =
        DecodeTensor(tensors[i], absl::StrCat("inputs[", i, "] '", tensors[i].name(), "'"));
    if (!input.ok()) return input.status();
    inputs.push_back(*std::move(input));
  }
  return inputs;
}

v1::DataType EncodeDType(DType dtype) {
  return dtype == DType::kFloat32 ? v1::DATA_TYPE_FLOAT32 : v1::DATA_TYPE_INT64;
}

void FillSpec(const TensorSpec& spec, v1::TensorSpec* out) {
  out->set_name(spec.name);
  out->set_dtype(EncodeDType(spec.type.dtype));
  for (int64_t d : spec.type.shape) out->add_shape(d);
}

// Writes the merged outputs straight into the response's tensors; outputs
// the client did not ask for land in scratch memory and are dropped.
class ResponseSink : public OutputSink {
 public:
  ResponseSink(const Model& model, std::vector<bool> wanted, v1::PredictResponse* response)
      : model_(model), wanted_(std::move(wanted)), response_(response) {}

  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override {
    const size_t bytes = static_cast<size_t>(NumElements(type.shape)) * DTypeSize(type.dtype);
    std::string* raw;
    if (wanted_[index]) {
      v1::Tensor* tensor = response_->add_outputs();
      tensor->set_name(model_.outputs()[index].name);
      tensor->set_dtype(EncodeDType(type.dtype));
      for (int64_t d : type.shape) tensor->add_shape(d);
      raw = tensor->mutable_raw();
    } else {
      raw = &scratch_[index];
    }
    raw->resize(bytes);
    return raw->data();
  }

 private:
  const Model& model_;
  const std::vector<bool> wanted_;
  v1::PredictResponse* response_;
  std::map<int, std::string> scratch_;
};

}  // namespace

ReplicadService::ReplicadService(const ServedModels& models, std::vector<DeviceInfo> devices,
                                 ServerMetrics& metrics)
    : models_(models), devices_(std::move(devices)), metrics_(metrics) {}

grpc::ServerUnaryReactor* ReplicadService::Answer(grpc::CallbackServerContext* context,
                                                  const std::string& model,
                                                  const std::string& method,
                                                  const absl::Status& status, double seconds) {
  metrics_.RecordRequest(model, method, status, seconds);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status ReplicadService::UnknownModel(const std::string& name,
                                           const std::string& field) const {
  return absl::NotFoundError(absl::StrCat(field, ": '", name, "' is not served; served models: ",
                                          models_.NameList()));
}

void ReplicadService::InFlight::Release() {
  if (service_ == nullptr) return;
  absl::MutexLock lock(&service_->mu_);
  --service_->in_flight_;
  service_ = nullptr;
}

std::optional<ReplicadService::InFlight> ReplicadService::Admit() {
  absl::MutexLock lock(&mu_);
  if (draining_) return std::nullopt;
  ++in_flight_;
  return InFlight(this);
}

void ReplicadService::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool ReplicadService::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](int* in_flight) { return *in_flight == 0; }, &in_flight_),
                              timeout);
}

grpc::ServerUnaryReactor* ReplicadService::Predict(grpc::CallbackServerContext* context,
                                                   const v1::PredictRequest* request,
                                                   v1::PredictResponse* response) {
  const Clock::time_point start = Clock::now();
  std::optional<InFlight> in_flight = Admit();
  if (!in_flight) {
    return Answer(context, "", "Predict",
                  absl::UnavailableError("replicad is shutting down; send the request elsewhere"),
                  SecondsSince(start));
  }
  const ServedModel* served = models_.Find(request->model());
  if (served == nullptr) {
    // Unknown names share one label value, so clients cannot grow the series.
    return Answer(context, "", "Predict", UnknownModel(request->model()), SecondsSince(start));
  }
  const Model& model = *served->model;

  absl::StatusOr<std::vector<RequestInput>> inputs = DecodeInputs(request->inputs());
  if (!inputs.ok()) return Answer(context, model.name(), "Predict", inputs.status(), SecondsSince(start));
  std::vector<bool> wanted(model.outputs().size(), request->output_names_size() == 0);
  for (int i = 0; i < request->output_names_size(); ++i) {
    const int index = model.OutputIndex(request->output_names(i));
    if (index < 0) {
      std::string names;
      for (const TensorSpec& s : model.outputs()) absl::StrAppend(&names, names.empty() ? "" : ", ", s.name);
      return Answer(context, model.name(), "Predict",
                    absl::InvalidArgumentError(absl::StrCat(
                        "output_names[", i, "]: model '", model.name(), "' has no output '",
                        request->output_names(i), "'; expected one of: ", names)),
                    SecondsSince(start));
    }
    wanted[index] = true;
  }
  // The request outlives the Predict (gRPC keeps it until Finish), so the
  // input tensors view its bytes without a keep-alive.
  absl::StatusOr<std::vector<Tensor>> bound =
      BindInputs(model, *inputs, served->max_batch_size, nullptr);
  if (!bound.ok()) return Answer(context, model.name(), "Predict", bound.status(), SecondsSince(start));
  // Once trained, the model predicts with the latest step's weights; the
  // callback keeps the set it started on alive.
  absl::StatusOr<std::shared_ptr<ReplicaSet>> trained = served->training->PredictReplicas();
  if (!trained.ok()) return Answer(context, model.name(), "Predict", trained.status(), SecondsSince(start));
  ReplicaSet* replicas = *trained ? trained->get() : served->replicas.get();

  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  response->set_model(model.name());
  const int64_t rows = (*bound)[0].shape()[0];
  auto sink = std::make_shared<ResponseSink>(model, std::move(wanted), response);
  const ReplicaSet& set = *replicas;
  replicas->Predict(
      *std::move(bound), sink.get(),
      [this, sink, reactor, response, start, rows, &set, keep = *std::move(trained),
       in_flight = *std::move(in_flight)](
          absl::Status status, std::vector<BatchSlice> slices) mutable {
        for (const BatchSlice& slice : slices) {
          const Replica& replica = *set.replicas()[slice.slot];
          v1::SliceInfo* info = response->add_slices();
          info->set_slot(replica.slot().name);
          info->set_device(DeviceIdToString(replica.device().info().id));
          info->set_begin(slice.begin);
          info->set_end(slice.end);
        }
        if (status.ok()) {
          metrics_.RecordSamples(set.model().name(), rows);
        } else {
          response->Clear();
        }
        metrics_.RecordRequest(set.model().name(), "Predict", status, SecondsSince(start));
        reactor->Finish(ToGrpcStatus(status));
        in_flight.Release();
      });
  return reactor;
}

grpc::ServerUnaryReactor* ReplicadService::ListDevices(grpc::CallbackServerContext* context,
                                                       const v1::ListDevicesRequest*,
                                                       v1::ListDevicesResponse* response) {
  const Clock::time_point start = Clock::now();
  std::map<DeviceId, int> slots;
  for (const auto& [name, served] : models_.models()) {
    for (const auto& replica : served.replicas->replicas()) ++slots[replica->slot().device];
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
    out->set_slots(slots[d.id]);
  }
  return Answer(context, "", "ListDevices", absl::OkStatus(), SecondsSince(start));
}

grpc::ServerUnaryReactor* ReplicadService::ListModels(grpc::CallbackServerContext* context,
                                                      const v1::ListModelsRequest*,
                                                      v1::ListModelsResponse* response) {
  const Clock::time_point start = Clock::now();
  for (const auto& [name, served] : models_.models()) {
    v1::ModelSummary* out = response->add_models();
    out->set_name(name);
    out->set_path(served.model->source());
  }
  return Answer(context, "", "ListModels", absl::OkStatus(), SecondsSince(start));
}

grpc::ServerUnaryReactor* ReplicadService::GetModel(grpc::CallbackServerContext* context,
                                                    const v1::GetModelRequest* request,
                                                    v1::GetModelResponse* response) {
  const Clock::time_point start = Clock::now();
  const ServedModel* served = models_.Find(request->name());
  if (served == nullptr) {
    return Answer(context, "", "GetModel", UnknownModel(request->name(), "name"),
                  SecondsSince(start));
  }
  v1::ModelInfo* info = response->mutable_model();
  info->set_name(served->model->name());
  info->set_path(served->model->source());
  info->set_opset(served->model->graph().opset);
  for (const TensorSpec& s : served->model->inputs()) FillSpec(s, info->add_inputs());
  for (const TensorSpec& s : served->model->outputs()) FillSpec(s, info->add_outputs());
  for (const auto& replica : served->replicas->replicas()) {
    v1::ReplicaInfo* r = info->add_replicas();
    r->set_slot(replica->slot().name);
    r->set_device(DeviceIdToString(replica->device().info().id));
    r->set_weight(replica->slot().weight);
    const absl::Status health = replica->device().health();
    r->set_healthy(health.ok());
    r->set_fault(std::string(health.message()));
    if (health.ok()) info->set_ready(true);
  }
  info->set_merge_device(DeviceIdToString(served->replicas->merge_device()));
  info->set_max_batch_size(served->max_batch_size);
  return Answer(context, served->model->name(), "GetModel", absl::OkStatus(), SecondsSince(start));
}

grpc::ServerUnaryReactor* ReplicadService::ConfigureTraining(
    grpc::CallbackServerContext* context, const v1::ConfigureTrainingRequest* request,
    v1::ConfigureTrainingResponse* response) {
  const Clock::time_point start = Clock::now();
  const ServedModel* served = models_.Find(request->model());
  if (served == nullptr) {
    return Answer(context, "", "ConfigureTraining", UnknownModel(request->model()), SecondsSince(start));
  }
  absl::StatusOr<v1::TrainingConfig> config = served->training->Configure(request->config());
  if (config.ok()) *response->mutable_config() = *config;
  return Answer(context, served->model->name(), "ConfigureTraining", config.status(),
                SecondsSince(start));
}

grpc::ServerUnaryReactor* ReplicadService::TrainStep(grpc::CallbackServerContext* context,
                                                     const v1::TrainStepRequest* request,
                                                     v1::TrainStepResponse* response) {
  const Clock::time_point start = Clock::now();
  std::optional<InFlight> in_flight = Admit();
  if (!in_flight) {
    return Answer(context, "", "TrainStep",
                  absl::UnavailableError("replicad is shutting down; send the request elsewhere"),
                  SecondsSince(start));
  }
  const ServedModel* served = models_.Find(request->model());
  if (served == nullptr) {
    return Answer(context, "", "TrainStep", UnknownModel(request->model()), SecondsSince(start));
  }
  const Model& model = *served->model;
  auto fail = [&](const absl::Status& status) {
    return Answer(context, model.name(), "TrainStep", status, SecondsSince(start));
  };
  absl::StatusOr<std::vector<RequestInput>> inputs = DecodeInputs(request->inputs());
  if (!inputs.ok()) return fail(inputs.status());
  absl::StatusOr<std::vector<Tensor>> bound =
      BindInputs(model, *inputs, served->max_batch_size, nullptr);
  if (!bound.ok()) return fail(bound.status());
  if (!request->has_targets()) return fail(absl::InvalidArgumentError("targets: missing"));
  absl::StatusOr<RequestInput> targets = DecodeTensor(request->targets(), "targets");
  if (!targets.ok()) return fail(targets.status());
  const int64_t rows = (*bound)[0].shape()[0];
  absl::StatusOr<Tensor> bound_targets = BindTargets(*targets, rows, nullptr);
  if (!bound_targets.ok()) return fail(bound_targets.status());

  // The step runs here, on this gRPC thread: steps of a model are serial anyway.
  absl::StatusOr<DataParallelTrainer::StepResult> step =
      served->training->Step(*bound, *bound_targets);
  if (!step.ok()) return fail(step.status());
  response->set_model(model.name());
  response->set_loss(step->loss);
  response->set_has_accuracy(step->accuracy.has_value());
  if (step->accuracy) response->set_accuracy(*step->accuracy);
  response->set_step(step->step);
  response->set_samples(step->samples);
  response->set_reduce_seconds(step->reduce_seconds);
  response->set_optimizer_seconds(step->optimizer_seconds);
  const std::vector<SlotAssignment>& slots = served->training->slots();
  for (const DataParallelTrainer::SliceResult& slice : step->slices) {
    v1::ReplicaStep* out = response->add_replicas();
    out->set_slot(slots[slice.slice.slot].name);
    out->set_device(DeviceIdToString(slots[slice.slice.slot].device));
    out->set_begin(slice.slice.begin);
    out->set_end(slice.slice.end);
    out->set_compute_seconds(slice.compute_seconds);
  }
  metrics_.RecordTrainStep(model.name(), *step, slots);
  return Answer(context, model.name(), "TrainStep", absl::OkStatus(), SecondsSince(start));
}

grpc::ServerUnaryReactor* ReplicadService::SaveCheckpoint(
    grpc::CallbackServerContext* context, const v1::SaveCheckpointRequest* request,
    v1::SaveCheckpointResponse* response) {
  const Clock::time_point start = Clock::now();
  const ServedModel* served = models_.Find(request->model());
  if (served == nullptr) {
    return Answer(context, "", "SaveCheckpoint", UnknownModel(request->model()), SecondsSince(start));
  }
  absl::StatusOr<std::pair<std::string, int64_t>> saved =
      served->training->SaveCheckpoint(request->path());
  if (saved.ok()) {
    response->set_path(saved->first);
    response->set_step(saved->second);
  }
  return Answer(context, served->model->name(), "SaveCheckpoint", saved.status(),
                SecondsSince(start));
}

}  // namespace replicad
