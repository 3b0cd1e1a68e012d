#include "core/serve/replica.h"

#include "core/device/device_copy.h"
#include "core/ops/op_util.h"

namespace replicad {

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(std::shared_ptr<const Model> model,
                                                         SlotAssignment slot,
                                                         std::unique_ptr<Device> device) {
  std::unique_ptr<Replica> replica(
      new Replica(std::move(model), std::move(slot), std::move(device)));
  Device& d = *replica->device_;
  for (const auto& [v, host] : replica->model_->graph().initializers) {
    absl::StatusOr<Tensor> weight = CopyToDevice(d, host);
    if (!weight.ok()) return weight.status();
    replica->weights_.emplace(v, *std::move(weight));
  }
  if (absl::Status s = d.Synchronize(); !s.ok()) return s;
  return replica;
}

absl::StatusOr<ExecutionPlan*> Replica::PlanFor(const std::vector<Shape>& input_shapes) {
  // Building under the lock keeps two requests of a new size from both
  // building it; it happens once per size.
  absl::MutexLock lock(&mu_);
  auto it = plans_.find(input_shapes);
  if (it != plans_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<ExecutionPlan>> plan =
      ExecutionPlan::Create(model_->graph(), weights_, *device_, input_shapes);
  if (!plan.ok()) return plan.status();
  ExecutionPlan* raw = plan->get();
  if (device_->memory_location().kind != MemoryKind::kHost) {
    DeviceIo io;
    for (const TensorType& type : raw->input_types()) {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer = device_->Allocate(ByteSize(type));
      if (!buffer.ok()) return buffer.status();
      io.input_ptrs.push_back((*buffer)->data());
      io.inputs.push_back(*std::move(buffer));
    }
    for (const TensorType& type : raw->output_types()) {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer = device_->Allocate(ByteSize(type));
      if (!buffer.ok()) return buffer.status();
      io.output_ptrs.push_back((*buffer)->data());
      io.outputs.push_back(*std::move(buffer));
    }
    absl::MutexLock io_lock(&io_mu_);
    device_io_.emplace(raw, std::move(io));
  }
  plans_.emplace(input_shapes, *std::move(plan));
  return raw;
}

absl::Status Replica::RunOnHost(ExecutionPlan& plan, const void* const* host_inputs,
                                void* const* host_outputs) {
  const MemoryLocation here = device_->memory_location();
  if (here.kind == MemoryKind::kHost) return plan.Run(host_inputs, host_outputs);
  const DeviceIo* io = nullptr;
  {
    absl::MutexLock lock(&io_mu_);
    auto it = device_io_.find(&plan);
    if (it == device_io_.end()) return absl::InternalError("RunOnHost: the plan is not this replica's");
    io = &it->second;
  }
  const MemoryLocation host{};
  for (size_t i = 0; i < io->inputs.size(); ++i) {
    REPLICAD_RETURN_IF_ERROR(device_->CopyOnStream(host_inputs[i], host, io->inputs[i]->data(),
                                                   here, io->inputs[i]->bytes()));
  }
  REPLICAD_RETURN_IF_ERROR(plan.Run(io->input_ptrs.data(), io->output_ptrs.data()));
  for (size_t j = 0; j < io->outputs.size(); ++j) {
    REPLICAD_RETURN_IF_ERROR(device_->CopyOnStream(io->outputs[j]->data(), here, host_outputs[j],
                                                   host, io->outputs[j]->bytes()));
  }
  return device_->AwaitStream();
}

size_t Replica::plan_count() const {
  absl::MutexLock lock(&mu_);
  return plans_.size();
}

}  // namespace replicad
