#include "server/grpc/v1_messages.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

// v1::DataType's values are ONNX's, as DType's are.
absl::StatusOr<DType> DecodeDType(int value, const std::string& field) {
  absl::StatusOr<DType> dtype = DTypeFromOnnx(value);
  if (value != v1::DATA_TYPE_UNSPECIFIED && v1::DataType_IsValid(value) && dtype.ok()) {
    return *dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field,
      ".dtype: expected DATA_TYPE_FLOAT32, DATA_TYPE_FLOAT16, DATA_TYPE_BFLOAT16, "
      "DATA_TYPE_INT64, DATA_TYPE_INT32, DATA_TYPE_INT8, DATA_TYPE_UINT8 or DATA_TYPE_BOOL, "
      "received ",
      v1::DataType_IsValid(value) ? v1::DataType_Name(value) : std::string("unknown"), " (", value,
      ")"));
}

void AddReplica(v1::TrainStepResponse* response, const RankSlice& slice, bool prefetched) {
  v1::ReplicaStep* out = response->add_replicas();
  out->set_slot(slice.slot);
  out->set_device(slice.device);
  out->set_begin(slice.begin);
  out->set_end(slice.end);
  out->set_compute_seconds(slice.compute_seconds);
  out->set_rank(slice.rank);
  out->set_input_prefetched(prefetched);
}

}  // namespace

absl::StatusOr<RequestInput> DecodeTensor(const v1::Tensor& t, absl::string_view raw,
                                          const std::string& field) {
  REPLICAD_ASSIGN_OR_RETURN(DType dtype, DecodeDType(t.dtype(), field));
  return RequestInput{t.name(), dtype, Shape(t.shape().begin(), t.shape().end()), raw.data(),
                      raw.size()};
}

absl::StatusOr<std::vector<RequestInput>> DecodeInputs(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors,
    absl::Span<const std::shared_ptr<HostBuffer>> raw) {
  std::vector<RequestInput> inputs;
  inputs.reserve(tensors.size());
  for (int i = 0; i < tensors.size(); ++i) {
    REPLICAD_ASSIGN_OR_RETURN(
        RequestInput input,
        DecodeTensor(tensors[i], raw.empty() ? tensors[i].raw() : BytesOf(raw[i]),
                     absl::StrCat("inputs[", i, "] '", tensors[i].name(), "'")));
    inputs.push_back(std::move(input));
  }
  return inputs;
}

absl::StatusOr<TrainRequest> TrainRequestOf(const v1::TrainStepRequest& request) {
  TrainRequest train;
  train.model = request.model();
  REPLICAD_ASSIGN_OR_RETURN(train.inputs, DecodeInputs(request.inputs()));
  if (request.has_targets()) {
    REPLICAD_ASSIGN_OR_RETURN(train.targets,
                              DecodeTensor(request.targets(), request.targets().raw(), "targets"));
  }
  if (request.has_shard()) {
    train.shard =
        TrainShard{request.shard().step(), request.shard().rank(), request.shard().world_size()};
  }
  return train;
}

void FillTrainStepResponse(const DataParallelTrainer::StepResult& step, const LoadedModel& model,
                           v1::TrainStepResponse* response) {
  response->set_model(model.name);
  response->set_loss(step.loss);
  response->set_has_accuracy(step.accuracy.has_value());
  if (step.accuracy) response->set_accuracy(*step.accuracy);
  response->set_step(step.step);
  response->set_samples(step.samples);
  response->set_reduce_seconds(step.reduce_seconds);
  response->set_optimizer_seconds(step.optimizer_seconds);
  response->set_skipped(step.skipped);
  response->set_loss_scale(step.loss_scale);
  response->set_checkpoint_path(step.checkpoint_path);
  response->set_checkpoint_error(std::string(step.checkpoint_status.message()));
  // The trainer's slots are the serving slots, in the same order.
  const std::vector<SlotStatus> slots = model.servable->Slots();
  for (const DataParallelTrainer::SliceResult& slice : step.slices) {
    const SlotStatus& slot = slots[slice.slice.slot];
    AddReplica(response,
               RankSlice{step.rank, slot.slot, slot.device, slice.slice.begin, slice.slice.end,
                         slice.compute_seconds},
               slice.input_prefetched);
  }
  for (const RankSlice& slice : step.other_ranks) AddReplica(response, slice, false);
}

}  // namespace replicad
