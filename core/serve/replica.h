#ifndef REPLICAD_CORE_SERVE_REPLICA_H_
#define REPLICAD_CORE_SERVE_REPLICA_H_

#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device.h"
#include "core/device/device_map.h"
#include "core/model/execution_plan.h"
#include "core/model/model.h"

namespace replicad {

// One copy of a model on one device slot: the slot's Device, the model's
// weights in that device's memory, and the execution plans built so far, one
// per set of input shapes (in practice: per slice size). Thread-safe; plans
// it returns are run on the slot's stream only.
class Replica {
 public:
  // Copies the template's initializers to `device`. Fails when the device
  // cannot hold them (ResourceExhausted naming the device).
  static absl::StatusOr<std::unique_ptr<Replica>> Create(std::shared_ptr<const Model> model,
                                                         SlotAssignment slot,
                                                         std::unique_ptr<Device> device);

  const SlotAssignment& slot() const { return slot_; }
  Device& device() const { return *device_; }
  const Model& model() const { return *model_; }

  // The plan for these input shapes, built on first use and cached for the
  // replica's lifetime. Must not be called on the slot's stream thread.
  absl::StatusOr<ExecutionPlan*> PlanFor(const std::vector<Shape>& input_shapes);
  size_t plan_count() const;

  // Runs `plan` (one of PlanFor's) reading and writing host memory: rows of
  // the request and of the response. A host-memory slot runs the plan on
  // them directly; a GPU slot copies the inputs into the plan's device
  // buffers, runs, copies the outputs back and waits. Call on the slot's
  // stream thread, from work that slot runs (Device::Enqueue).
  absl::Status RunOnHost(ExecutionPlan& plan, const void* const* host_inputs,
                         void* const* host_outputs);

 private:
  Replica(std::shared_ptr<const Model> model, SlotAssignment slot, std::unique_ptr<Device> device)
      : model_(std::move(model)), slot_(std::move(slot)), device_(std::move(device)) {}

  std::shared_ptr<const Model> model_;
  SlotAssignment slot_;
  std::unique_ptr<Device> device_;
  std::map<int, Tensor> weights_;  // Device copies of the initializers.
  mutable absl::Mutex mu_;
  std::map<std::vector<Shape>, std::unique_ptr<ExecutionPlan>> plans_ ABSL_GUARDED_BY(mu_);
  // Device slots: each plan's input and output buffers in device memory,
  // made with the plan so that requests allocate nothing.
  struct DeviceIo {
    std::vector<std::shared_ptr<Buffer>> inputs;
    std::vector<std::shared_ptr<Buffer>> outputs;
    std::vector<const void*> input_ptrs;
    std::vector<void*> output_ptrs;
  };
  // Its own lock: RunOnHost runs on the stream thread, while PlanFor holds
  // mu_ across kernel builds that wait for that thread.
  mutable absl::Mutex io_mu_;
  std::map<const ExecutionPlan*, DeviceIo> device_io_ ABSL_GUARDED_BY(io_mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REPLICA_H_
