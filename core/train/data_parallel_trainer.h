#ifndef REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_H_
#define REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_H_

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/batch_split.h"
#include "core/device/device.h"
#include "core/device/device_map.h"
#include "core/model/execution_plan.h"
#include "core/model/model.h"
#include "core/train/optimizer.h"
#include "core/train/trainer_options.h"
#include "core/train/trainer_reduction.h"
#include "core/train/training_graph.h"

namespace replicad {

// Exact data-parallel training over device slots (allreduce mode): each
// TrainStep splits the batch by slot weight, every slot computes the
// gradient of the *sum* of its rows' losses on its own copy of the weights,
// the gradients are summed over slots in slot order and divided by the global
// batch, and every slot applies the same optimizer update to its copy. So N
// slots train like one device on the whole batch, whatever the split, and
// the copies stay identical. With a parameter server (`ps` reduction) the
// sum goes to the server, which alone updates and then broadcasts the
// weights: the same arithmetic, one optimizer state instead of one per slot.
//
// allreduce: CPU slots are summed by the host, in slot order. GPU slots (all
// slots of an allreduce trainer are CPU or all GPU) sum on the devices:
// gradients live in one arena per slot, cut into ~25 MiB buckets in the
// order the backward pass writes them, and each bucket's all-reduce (NCCL
// across GPUs, after a local sum among slots that share a GPU) starts as
// soon as its gradients are written, overlapping the rest of the backward
// pass; each slot's optimizer then updates its copy on its GPU. NCCL's
// summation order is its own, but every slot receives the same sums, so the
// copies still agree bitwise.
// ps: slots may be CPU, GPU or both, the server a CPU or a GPU. Each slot's
// arena reaches the server's memory (copied after the slot's backward pass;
// read in place where the server shares the slot's memory), the
// server sums in slot order and scales (host loops, or Add and Mul kernels
// on a GPU: the same float operations), steps its optimizer, and every slot
// copies the server's weights.
// Thread-safe: steps run one at a time.
class DataParallelTrainer {
 public:
  // `model` must be imported without inference optimisations (training needs
  // the graph as written). Fails as BuildTrainingGraph does, or with the
  // optimizer's validation errors; InvalidArgument for no slots;
  // Unimplemented for a mix of CPU and GPU slots without a parameter server.
  // Allocates everything the steps use, the server's side included (their
  // ResourceExhausted, and the server's kernel build errors, pass through).
  // With ranks, `slots` are this rank's: Unimplemented for a parameter
  // server there; InvalidArgument when `slots` are not the rank's slots in
  // `reduction.ranks`.
  static absl::StatusOr<std::unique_ptr<DataParallelTrainer>> Create(
      std::shared_ptr<const Model> model, std::vector<TrainerSlot> slots,
      const TrainerOptions& options, TrainerReduction reduction = {});
  ~DataParallelTrainer();

  struct SliceResult {
    BatchSlice slice;
    double compute_seconds = 0;  // Forward and backward.
    double forward_seconds = 0;  // Of which the forward pass and the loss.
  };
  struct StepResult {
    double loss = 0;                 // Mean over the batch.
    std::optional<double> accuracy;  // Classification losses only.
    int64_t step = 0;                // Steps applied, this one included.
    int64_t samples = 0;
    std::vector<SliceResult> slices;  // Row order.
    // The host's sums, or the parameter server's (its copies from CPU slots
    // included; GPU slots send theirs, and NCCL reduces, within
    // compute_seconds).
    double reduce_seconds = 0;
    double optimizer_seconds = 0;
    // Gradient bytes the reduction took in: whole arenas copied to the
    // parameter server, the gradients themselves where read in place, whole
    // buckets for NCCL.
    int64_t reduced_bytes = 0;
    // Non-empty when the step was skipped (NonFiniteSteps::kSkip): why. A
    // skipped step changes nothing (weights, optimizer, running statistics,
    // the step count) and `step` is the count before it.
    std::string skipped;
    // For whoever checkpoints after a step (the trainer does not): the
    // checkpoint written, or why it failed. The step stands either way.
    std::string checkpoint_path;
    absl::Status checkpoint_status;
  };

  // One step. `inputs` are host tensors in model input order, validated
  // against the model and with the same dim 0 > 0 (see BindInputs);
  // `targets` has that many rows. On any error (e.g. a label out of range,
  // InvalidArgument naming it) nothing is updated. With ranks, every rank
  // steps on the same whole batch (or, other than rank 0, its rows of it:
  // StepRows) and runs its own slots' rows; `slices` are then this rank's
  // (slot indices its own, rows the batch's), and a step that fails on one
  // rank fails on all.
  absl::StatusOr<StepResult> Step(const std::vector<Tensor>& inputs, const Tensor& targets);

  // Step's checks of a batch, without stepping: rank 0 checks the whole
  // batch before it hands the other ranks their rows.
  absl::Status Validate(const std::vector<Tensor>& inputs, const Tensor& targets) const;

  // With ranks: the rows [first, end) of a batch of `batch` rows that the
  // job's split gives `rank`'s slots (first == end: none).
  struct RowRange {
    int64_t first = 0, end = 0;
  };
  RowRange RowsOfRank(int64_t batch, int rank) const;

  // With ranks, this rank's part of a step of the whole batch (of `batch`
  // rows) that rank 0 steps on: `inputs` and `targets` are the rows
  // RowsOfRank(batch, rank()) gives it, starting at `first_row`, and may
  // have none. Trains as Step on the whole batch would, without the other
  // ranks' rows. InvalidArgument when the rows are not this rank's part;
  // FailedPrecondition without ranks.
  absl::StatusOr<StepResult> StepRows(int64_t first_row, int64_t batch,
                                      const std::vector<Tensor>& inputs, const Tensor& targets);

  // With ranks, one rank's shard of step `step` (the job's next step, on
  // every rank; FailedPrecondition otherwise, on every rank): `inputs` and
  // `targets` are this rank's rows only (at least one), as from a data
  // loader per rank. The job's batch is every rank's shard in rank order;
  // each rank splits its own shard over its slots by their weights, and
  // the sums, dropout masks (by global row) and SyncBatchNorm statistics are
  // the job's, as Step makes them. Every rank must take the same steps the
  // same way: FailedPrecondition without ranks.
  // `configuration` identifies the training configuration: the ranks must
  // agree on it (FailedPrecondition otherwise).
  absl::StatusOr<StepResult> StepShard(int64_t step, uint64_t configuration,
                                       const std::vector<Tensor>& inputs, const Tensor& targets);

  int64_t step() const;
  const TrainingGraph& training_graph() const { return training_; }
  const Model& model() const { return *model_; }
  // The current weights of `slot` (host copies), in parameter order, and its
  // buffers (running statistics) in buffer order. Fails, with the device's
  // error, when a copy from a device fails.
  absl::StatusOr<std::vector<Tensor>> SlotParameters(int slot) const;
  absl::StatusOr<std::vector<Tensor>> SlotBuffers(int slot) const;
  // Slot 0's optimizer state (every slot holds the same), for checkpoints.
  // Fails when a GPU copy fails.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> OptimizerState() const;
  // Resumes from a checkpoint: the step count, and the optimizer state on
  // every slot (empty `state`: the optimizer starts fresh). Fails as
  // Optimizer::Restore does, changing nothing.
  absl::Status Resume(int64_t step, const std::vector<std::pair<std::string, Tensor>>& state);
  // The model with the current weights: the training model's graph with its
  // parameters replaced (not optimised for inference). Fails as
  // SlotParameters does: a failed copy is never taken for the weights.
  absl::StatusOr<std::shared_ptr<const Model>> CurrentModel() const;

 private:
  struct Slot;
  struct SlotPlan;
  struct ServerReduction;
  // A contiguous range of the gradient arena reduced in one call, once its
  // `parameters` gradients are written.
  struct Bucket {
    size_t offset = 0;
    size_t bytes = 0;
    int parameters = 0;
  };
  DataParallelTrainer(std::shared_ptr<const Model> model, TrainingGraph training,
                      const TrainerOptions& options);
  // Step's body, in stages; `*progress` tells how far it went across ranks.
  struct StepState;
  // Which rows a step is given: the whole batch (Step), a shard (StepShard)
  // or this rank's part of rank 0's batch (StepRows).
  struct StepRowsGiven {
    int64_t shard_step = 0;       // > 0: StepShard's.
    uint64_t configuration = 0;   // StepShard's.
    int64_t part_first_row = -1;  // >= 0: StepRows'.
    int64_t part_batch = 0;       // StepRows'.
  };
  struct StepProgress {
    bool ready = false;   // Every rank was ready (GatherReadiness): every rank goes on to sum.
    bool summed = false;  // It summed across ranks (SumStep).
  };
  absl::StatusOr<StepResult> StepLocked(const std::vector<Tensor>& inputs, const Tensor& targets,
                                        const StepRowsGiven& given, StepProgress* progress)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the ranks must share at every step (GatherReadiness): the kind of
  // reduction, the weights they started from, the step count; and the
  // check that they do (FailedPrecondition naming the first rank that does
  // not, the same on every rank).
  std::string RanksMustShare() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRanksAlike(const std::vector<std::string>& every) const;
  // A shard's step: every rank's row count (`valid`: this shard's checks).
  absl::Status ExchangeShards(StepState& step, const absl::Status& valid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Step, StepRows and StepShard: one step, which every rank sums once,
  // failed or not.
  absl::StatusOr<StepResult> StepGiven(const std::vector<Tensor>& inputs, const Tensor& targets,
                                       const StepRowsGiven& given) ABSL_LOCKS_EXCLUDED(mu_);
  // The checks of Step's contract; the batch's rows.
  // `rows_may_be_none`: a rank's part of a batch (StepRows).
  absl::Status ValidateBatch(const std::vector<Tensor>& inputs, const Tensor& targets,
                             int64_t* batch, bool rows_may_be_none = false) const;
  // The split (the job's, this rank's part; or this rank's shard over its
  // slots) and each slice's plan.
  absl::Status PlanSlices(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forward and backward of every slice, concurrently on the slots (GPU
  // slots also all-reduce their buckets meanwhile).
  absl::Status RunSlices(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The losses, and the gradients where the reduction reads them: summed
  // over this rank's slots on the host, then across ranks.
  absl::Status GatherGradients(StepState& step, bool* summed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Scales the host's sums by 1 / batch; why the step must not be applied
  // (a loss or a gradient that is not finite), or "".
  std::string ScaleAndCheckFinite(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why the update of the host's sums would make a weight not finite (a
  // learning rate of 1e38 on finite gradients), checked on the copy that
  // applies it before any copy does, or "". Device sums (NCCL, a GPU
  // server) are not checked here.
  std::string CheckUpdateStaysFinite(const StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A GPU parameter server's sums (nothing otherwise).
  absl::Status SumOnServer(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The optimizer on every copy of the weights (or the server's, then copied out).
  absl::Status ApplyUpdate(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first row's running statistics onto every slot.
  absl::Status ShareRunningStatistics(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StepResult ResultOf(const StepState& step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Into reduced_: per parameter, the sum of `sources` (gradient arenas in
  // host memory) in order; zeros when there are none.
  void SumOnHost(const std::vector<const void*>& sources) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places the gradients (one arena per slot) and cuts the buckets.
  void LayOutGradients(const std::vector<int64_t>& sizes);
  absl::StatusOr<SlotPlan*> PlanFor(Slot& slot, const std::vector<Shape>& shapes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The server's copies of the slots' arenas and, on a GPU, its sums and kernels.
  absl::Status SetUpServerReduction() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Per parameter, its gradient in `arena` (laid out by gradient_offsets_).
  std::vector<const float*> ArenaGradients(const void* arena) const;

  std::shared_ptr<const Model> model_;
  const TrainingGraph training_;
  const bool sync_batch_norm_;
  const uint64_t seed_;
  const TrainerOptions::NonFiniteSteps non_finite_steps_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  // `ps` reduction: the server's weights and optimizer (slots then have none).
  std::unique_ptr<Slot> server_ ABSL_GUARDED_BY(mu_);
  // Its side of the reduction (after server_: it goes first).
  std::unique_ptr<ServerReduction> server_reduction_ ABSL_GUARDED_BY(mu_);
  std::vector<double> weights_;
  // A job of several ranks, and the index of this rank's first slot among
  // all of the job's (0 without).
  std::shared_ptr<TrainingRanks> ranks_;
  int first_slot_ = 0;
  std::string starting_weights_;  // With ranks: a fingerprint of the weights it started from.
  // CPU slots, or a server on the host: the host's sums, per parameter.
  std::vector<std::vector<float>> reduced_ ABSL_GUARDED_BY(mu_);
  // GPU slots under allreduce: the reduction on the devices (after slots_: it goes first).
  std::unique_ptr<SlotAllReduce> all_reduce_;
  // The gradient arena's layout, the same on every slot.
  std::vector<size_t> gradient_offsets_;  // Bytes, per parameter.
  std::vector<int> bucket_of_;            // Per parameter.
  std::vector<Bucket> buckets_;           // In the order the backward pass fills them.
  size_t gradient_arena_bytes_ = 0;
  size_t gradient_bytes_ = 0;  // Of the gradients alone, without the padding.
  // Host copies of the running statistics on their way to every slot.
  std::vector<Tensor> buffer_staging_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_H_
