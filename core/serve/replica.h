#ifndef REPLICAD_CORE_SERVE_REPLICA_H_
#define REPLICAD_CORE_SERVE_REPLICA_H_

#include <deque>
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

  // How a slice of a batch runs here: whole, or on a slot whose memory the
  // host does not read, in chunks of rows whose upload, compute and download
  // overlap (Device lanes), so that the copies hide behind the compute.
  struct SlicePlan {
    ExecutionPlan* chunk = nullptr;  // For `chunk_rows` rows.
    ExecutionPlan* last = nullptr;   // For the last chunk's rows (may be `chunk`).
    int64_t rows = 0;
    int64_t chunk_rows = 0;
    std::vector<TensorType> output_types;  // Of the whole slice.
    int chunks() const;
  };
  // Input bytes below which a chunk would cost more in per-copy and
  // per-launch overhead than its overlap saves.
  static constexpr size_t kMinChunkBytes = size_t{8} << 20;
  struct ChunkOptions {
    int max_chunks = 1;
    size_t min_chunk_bytes = kMinChunkBytes;
    // When the device cannot hold the plans (ResourceExhausted), cut the
    // slice into twice as many chunks and try again, down to chunks of one
    // row, instead of failing. Plans that did fit stay cached.
    bool shrink_on_oom = false;
  };
  // The slice's plan for `input_shapes` (every dim 0 the slice's rows):
  // up to `max_chunks` chunks of at least `min_chunk_bytes` of input. One
  // chunk on a host-memory slot, or where the model cannot be cut by rows:
  // an output of rank >= 1 not keeping the batch in dim 0, or a rank-0
  // output that is not float32 (chunks' rank-0 outputs merge by mean).
  // Plan errors as PlanFor's. Must not be called on the slot's stream thread.
  absl::StatusOr<SlicePlan> PlanSlice(const std::vector<Shape>& input_shapes,
                                      const ChunkOptions& options);

  // Runs `plan` on rows of the request in host memory. Outputs of rank >= 1
  // are written at `outputs` in `outputs_location`: host memory, or (GPU
  // slots) any GPU's, by peer copy. Rank-0 outputs always go to host memory:
  // over chunks, their row-weighted mean. FailedPrecondition for device
  // outputs from a host slot. Call on the slot's stream thread.
  absl::Status RunSlice(const SlicePlan& plan, const void* const* host_inputs,
                        void* const* outputs, MemoryLocation outputs_location);

 private:
  Replica(std::shared_ptr<const Model> model, SlotAssignment slot, std::unique_ptr<Device> device)
      : model_(std::move(model)), slot_(std::move(slot)), device_(std::move(device)) {}

  std::shared_ptr<const Model> model_;
  SlotAssignment slot_;
  std::unique_ptr<Device> device_;
  std::map<int, Tensor> weights_;  // Device copies of the initializers.
  mutable absl::Mutex mu_;
  std::map<std::vector<Shape>, std::unique_ptr<ExecutionPlan>> plans_ ABSL_GUARDED_BY(mu_);
  // Device slots: a plan's input and output buffers in device memory, made
  // with the plan so that requests allocate nothing; two sets for a plan
  // that runs consecutive chunks, one filling while the other computes.
  struct IoSet {
    std::vector<std::shared_ptr<Buffer>> inputs;
    std::vector<std::shared_ptr<Buffer>> outputs;
    std::vector<void*> input_ptrs;  // Written by uploads, read by the plan.
    std::vector<void*> output_ptrs;
  };
  // PlanSlice for `chunks` chunks (1: whole); `cut` false when the model
  // turned out not to be cuttable, and the plan is whole.
  absl::StatusOr<SlicePlan> PlanChunks(const std::vector<Shape>& input_shapes, int chunks,
                                       bool* cut);
  // Makes the plan's sets number at least `count`.
  absl::Status AddIoSets(const ExecutionPlan& plan, size_t count);
  // Set `index` of the plan; it stays put while sets are added.
  absl::StatusOr<const IoSet*> IoSetOf(const ExecutionPlan& plan, size_t index) const;
  // Its own lock: RunSlice runs on the stream thread, while PlanFor holds
  // mu_ across kernel builds that wait for that thread.
  mutable absl::Mutex io_mu_;
  std::map<const ExecutionPlan*, std::deque<IoSet>> device_io_ ABSL_GUARDED_BY(io_mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REPLICA_H_
