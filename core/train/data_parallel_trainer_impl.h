#ifndef REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_IMPL_H_
#define REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_IMPL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/run_context.h"
#include "core/train/barrier_collective.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/gradient_reduction.h"
#include "core/train/loss_scaler.h"
#include "core/train/rank_coordinator.h"
#include "core/train/step_state.h"
#include "core/train/training_slot.h"

namespace replicad {

// Internal to DataParallelTrainer: its state and the stages of a step. The
// step runs in data_parallel_trainer.cc; whether its sums may be applied in
// data_parallel_step_checks.cc; the running statistics it shares in
// data_parallel_running_statistics.cc.
class DataParallelTrainer::Impl {
 public:
  static absl::StatusOr<std::unique_ptr<Impl>> Create(std::shared_ptr<const Model> model,
                                                      std::vector<TrainerSlot> slots,
                                                      const TrainerOptions& options,
                                                      TrainerReduction reduction);
  ~Impl();

  // Step, StepRows and StepShard: one step, which every rank sums once,
  // failed or not.
  absl::StatusOr<StepResult> StepGiven(const std::vector<Tensor>& inputs, const Tensor& targets,
                                       const StepMode& mode) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The contract's calls other than the steps read the state directly.
  friend class DataParallelTrainer;

  Impl(std::shared_ptr<const Model> model, TrainingGraph training, const TrainerOptions& options);

  // Step's body, in stages; `*progress` tells how far it went across ranks.
  absl::StatusOr<StepResult> StepLocked(const std::vector<Tensor>& inputs, const Tensor& targets,
                                        const StepMode& mode, StepProgress* progress)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The split (the job's, this rank's part; or this rank's shard over its
  // slots) and each slice's plan.
  absl::Status PlanSlices(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SplitRows(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<SlotPlan*> PlanFor(TrainingSlot& slot, const std::vector<Shape>& shapes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forward and backward of every slice, concurrently on the slots (with
  // the reduction's part of each slot: GPU slots all-reduce their buckets
  // meanwhile, or send their gradients to a parameter server).
  absl::Status RunSlices(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slice `i` on `slot`'s stream thread.
  absl::Status RunSlice(StepState& step, int i, TrainingSlot& slot, const RunContext& context,
                        BarrierCollective& collective, SlotReducer& reducer);
  // After slice work on `slot` was issued: the caller's upcoming batch's
  // rows for that slot, uploaded meanwhile (input_prefetch.h), when the
  // step has an upcoming batch (StepState::upcoming) and the slot's memory
  // is not the host's.
  void UploadUpcoming(const StepState& step, int slot_index, TrainingSlot& slot);
  // The losses, and the gradients where the host reads them: summed over
  // this rank's slots, then across ranks.
  absl::Status GatherGradients(StepState& step, bool* summed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Scales the host's sums by 1 / batch; why the step must not be applied
  // (a loss or a gradient that is not finite), or "".
  std::string ScaleAndCheckFinite(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why the update of the host's sums would make a weight not finite (a
  // learning rate of 1e38 on finite gradients), checked on the copy that
  // applies it before any copy does, or "". Device sums (NCCL, a GPU
  // server) are not checked here.
  std::string CheckUpdateStaysFinite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first row's running statistics onto every slot.
  absl::Status ShareRunningStatistics(StepState& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StepResult ResultOf(const StepState& step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job of whole batches: every rank's slices to every rank (one gather),
  // into result->other_ranks. A failure loses only the report.
  void ShareSliceReports(const StepState& step, StepResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const Model> model_;
  const TrainingGraph training_;
  const bool sync_batch_norm_;
  const uint64_t seed_;
  const TrainerOptions::NonFiniteSteps non_finite_steps_;
  const GradientLayout layout_;
  // A job of several ranks; null when this process trains alone.
  std::unique_ptr<RankCoordinator> ranks_;
  std::vector<double> weights_;  // Of this process's slots.
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<TrainingSlot>> slots_ ABSL_GUARDED_BY(mu_);
  // After slots_: it goes first.
  std::unique_ptr<GradientReduction> reduction_ ABSL_GUARDED_BY(mu_);
  // Host copies of the running statistics on their way to every slot.
  std::vector<Tensor> buffer_staging_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  // Where the caller posts its next batch (ExpectBatchesFrom); may be null.
  std::shared_ptr<const UpcomingBatches> upcoming_ ABSL_GUARDED_BY(mu_);
  // fp16 only: the loss scale between steps.
  std::optional<LossScaler> loss_scaler_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_IMPL_H_
