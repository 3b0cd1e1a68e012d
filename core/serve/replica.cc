#include "core/serve/replica.h"

#include "core/device/device_copy.h"

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
  plans_.emplace(input_shapes, *std::move(plan));
  return raw;
}

size_t Replica::plan_count() const {
  absl::MutexLock lock(&mu_);
  return plans_.size();
}

}  // namespace replicad
