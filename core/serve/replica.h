#ifndef REPLICAD_CORE_SERVE_REPLICA_H_
#define REPLICAD_CORE_SERVE_REPLICA_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device.h"
#include "core/device/device_map.h"
#include "core/model/execution_plan.h"
#include "core/model/model.h"
#include "core/model/shared_plan_arena.h"
#include "core/serve/plan_cache.h"
#include "core/serve/recorded_plan_run.h"

namespace replicad {

// One copy of a model on one device slot: the slot's Device, the model's
// weights in that device's memory, and a cache of execution plans, one per
// set of input shapes (in practice: per slice size), each with its device
// buffers. Thread-safe; plans it returns are run on the slot's stream only.
//
// The cache (PlanCache: `max_plans`, `max_plan_bytes`, least recently used
// out; PlanFor and PlanSlice are uses) runs a plan over the byte bound
// alone uncached, and builds evicted shapes again when next asked for. A
// plan in use (with its buffers) lives until its last holder (PlanFor
// result, SlicePlan) lets go, on any thread, even after the Replica is
// gone; it runs only while its Replica lives (it reads its weights and
// device).
class Replica {
 public:
  static constexpr size_t kDefaultMaxPlans = 16;

  // Copies the template's initializers to `device` (a host device reads the
  // template's own: no copy per slot). Fails when the device cannot hold them
  // (ResourceExhausted naming the device); InvalidArgument when `max_plans`
  // is 0. `max_plan_bytes` 0: no bound on bytes.
  static absl::StatusOr<std::unique_ptr<Replica>> Create(std::shared_ptr<const Model> model,
                                                         SlotAssignment slot,
                                                         std::unique_ptr<Device> device,
                                                         size_t max_plans = kDefaultMaxPlans,
                                                         size_t max_plan_bytes = 0);

  const SlotAssignment& slot() const { return slot_; }
  Device& device() const { return *device_; }
  const Model& model() const { return *model_; }

  // Plans built instead of found in the cache, and the seconds that took.
  struct PlanBuilds {
    int count = 0;
    double seconds = 0;
  };
  // The plan for these input shapes: the cached one, or built now and cached
  // (then counted in `builds`, when given); with `cached_only`, null instead
  // of a build. Errors name the node (ExecutionPlan::Create);
  // ResourceExhausted when the device cannot hold it. Must not be called on
  // the slot's stream thread.
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> PlanFor(const std::vector<Shape>& input_shapes,
                                                         PlanBuilds* builds = nullptr,
                                                         bool cached_only = false);
  size_t max_plans() const;
  // Device memory the cached plans hold: their own buffers and input/output
  // sets, plus (host slots) the arena they share, as large as the largest
  // one's needs. Plans evicted but still held by a running slice are not
  // counted. Lock-free: read on every slice for the metrics.
  size_t plan_memory_bytes() const { return plan_bytes_.load(std::memory_order_relaxed); }
  // Frees a host slot's arena after the work queued on its stream (no-op on devices).
  void ReleaseArena();
  const std::map<int, Tensor>& weights() const { return weights_; }  // As its plans read them.
  // Plans cached now (at most max_plans()); plans built since Create, rebuilds included.
  size_t plan_count() const;
  uint64_t plans_built() const;

  // Runs `plan` (one of PlanFor's, held by the caller for the call) reading
  // and writing host memory: rows of the request and of the response. A
  // host-memory slot runs the plan on them directly; a GPU slot copies the
  // inputs into the plan's device buffers, runs, copies the outputs back and
  // waits. Call on the slot's stream thread, from work that slot runs
  // (Device::Enqueue).
  // `step` (optional): a training step's context for the kernels, its
  // first_row that of the plan's first row.
  absl::Status RunOnHost(ExecutionPlan& plan, const void* const* host_inputs,
                         void* const* host_outputs, const RunContext* step = nullptr);

  // How a slice of a batch runs here: whole, or on a slot whose memory the
  // host does not read, in chunks of rows whose upload, compute and download
  // overlap (Device lanes), so that the copies hide behind the compute.
  // Holds its plans (see the class comment): keep it while the slice runs.
  struct SlicePlan {
    std::shared_ptr<ExecutionPlan> chunk;  // For `chunk_rows` rows.
    std::shared_ptr<ExecutionPlan> last;   // For the last chunk's rows (may be `chunk`).
    int64_t rows = 0;
    int64_t chunk_rows = 0;
    std::vector<TensorType> output_types;  // Of the whole slice.
    PlanBuilds builds;                     // What PlanSlice built for it.
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
  // With `cached_only`, builds nothing: `chunk` is null when a plan it needs
  // is not cached, or is being built by another thread (never waits for
  // one); errors are still possible (a GPU slot's second buffer set).
  absl::StatusOr<SlicePlan> PlanSlice(const std::vector<Shape>& input_shapes,
                                      const ChunkOptions& options, bool cached_only = false);

  // Runs `plan` on rows of the request in host memory. Outputs of rank >= 1
  // are written at `outputs` in `outputs_location`: host memory, or (GPU
  // slots) any GPU's, by peer copy. Rank-0 outputs always go to host memory:
  // over chunks, their row-weighted mean. FailedPrecondition for device
  // outputs from a host slot. Call on the slot's stream thread. `proceed`
  // (optional) is asked before every kernel (ExecutionPlan::Proceed); its
  // error stops the slice there, outputs partly written, and the slot runs
  // its next slice as ever (a GPU slot first waits for what it enqueued).
  // `step` (optional) as RunOnHost's (each chunk's first_row offset by its rows).
  absl::Status RunSlice(const SlicePlan& plan, const void* const* host_inputs, void* const* outputs,
                        MemoryLocation outputs_location,
                        const ExecutionPlan::Proceed* proceed = nullptr,
                        const RunContext* step = nullptr);
  // RunSlice for a data-dependent plan (ExecutionPlan::data_dependent; one
  // chunk): the outputs come back as host tensors of the shapes the request
  // gave them. A GPU slot uploads the inputs into the plan's buffers first.
  absl::Status RunSliceToHost(const SlicePlan& plan, const void* const* host_inputs,
                              std::vector<Tensor>* outputs,
                              const ExecutionPlan::Proceed* proceed = nullptr);

 private:
  Replica(std::shared_ptr<const Model> model, SlotAssignment slot, std::unique_ptr<Device> device,
          size_t max_plans, size_t max_plan_bytes)
      : model_(std::move(model)),
        slot_(std::move(slot)),
        device_(std::move(device)),
        plans_(max_plans, max_plan_bytes) {
    if (device_->memory_location().kind == MemoryKind::kHost) {
      plan_arena_ = std::make_shared<SharedPlanArena>(*device_);
    }
  }

  // Device slots: a plan's input and output buffers in device memory, made
  // with the plan so that requests allocate nothing; two sets for a plan
  // that runs consecutive chunks, one filling while the other computes.
  struct IoSet {
    std::vector<std::shared_ptr<Buffer>> inputs;
    std::vector<std::shared_ptr<Buffer>> outputs;
    std::vector<void*> input_ptrs;  // Written by uploads, read by the plan.
    std::vector<void*> output_ptrs;
    // The plan's run on these buffers recorded (Device::records_work).
    mutable RecordedPlanRun recorded;
  };
  // What a plan's holders share (they point at `plan`). Freeing it needs
  // nothing of the Replica, so a slice's last holder may let go after the
  // Replica is gone.
  struct PlanRecord {
    std::unique_ptr<ExecutionPlan> plan;
    // Never held while waiting: RunSlice takes it on the stream thread.
    absl::Mutex io_mu;
    std::deque<IoSet> io ABSL_GUARDED_BY(io_mu);
  };
  // PlanSlice for `chunks` chunks (1: whole); `cut` false when the model
  // turned out not to be cuttable, and the plan is whole.
  absl::StatusOr<SlicePlan> PlanChunks(const std::vector<Shape>& input_shapes, int chunks,
                                       bool cached_only, bool* cut);
  // The record of one of PlanFor's plans, while it lives; Internal otherwise.
  absl::StatusOr<std::shared_ptr<PlanRecord>> RecordOf(const ExecutionPlan& plan) const;
  // Makes the plan's sets number at least `count`.
  absl::Status AddIoSets(const ExecutionPlan& plan, size_t count);
  // Set `index` of the plan; it stays put while sets are added, and lives
  // as long as the plan.
  absl::StatusOr<const IoSet*> IoSetOf(const ExecutionPlan& plan, size_t index) const;

  std::shared_ptr<const Model> model_;
  SlotAssignment slot_;
  std::unique_ptr<Device> device_;
  std::atomic<size_t> plan_bytes_{0};  // plans_.bytes(), as of the last change.
  // Host slots: the intermediate values of all of the slot's plans.
  std::shared_ptr<SharedPlanArena> plan_arena_;
  std::map<int, Tensor> weights_;  // The initializers in the device's memory.
  mutable absl::Mutex mu_;
  PlanCache plans_ ABSL_GUARDED_BY(mu_);
  uint64_t plans_built_ ABSL_GUARDED_BY(mu_) = 0;
  // Every live plan's record, cached or evicted, for finding its buffers by
  // plan; entries of freed plans are pruned as plans are built. Its own
  // lock, never held while waiting: RunSlice takes it on the stream thread,
  // while PlanFor holds mu_ across kernel builds that wait for that thread.
  // Order: mu_, then records_mu_, then a record's io_mu.
  mutable absl::Mutex records_mu_;
  std::map<const ExecutionPlan*, std::weak_ptr<PlanRecord>> records_ ABSL_GUARDED_BY(records_mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REPLICA_H_
