#ifndef REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_H_
#define REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/batch_split.h"
#include "core/device/device.h"
#include "core/device/device_map.h"
#include "core/model/model.h"
#include "core/train/model_trainer.h"
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
// How the sums are made is the GradientReduction's (gradient_reduction.h):
// HostSum for CPU slots (the host, in slot order), NcclAllReduce for GPU
// slots (an allreduce trainer's slots are all CPU or all GPU; NCCL, bucket
// by bucket, overlapping the backward pass; every slot receives the same
// sums, so the copies agree bitwise) and ParameterServer for `ps` (slots
// CPU, GPU or both; the server sums in slot order, steps its optimizer and
// every slot copies its weights). What a job of several ranks adds is
// RankCoordinator's (rank_coordinator.h).
// Thread-safe: steps run one at a time.
class DataParallelTrainer final : public ModelTrainer {
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
  ~DataParallelTrainer() override;

  using SliceResult = TrainerSliceResult;
  // `reduce_seconds`: the host's sums, or the parameter server's (its
  // copies from CPU slots included; GPU slots send theirs, and NCCL
  // reduces, within compute_seconds). `reduced_bytes`: whole arenas copied
  // to the parameter server, the gradients themselves where read in place,
  // whole buckets for NCCL.
  using StepResult = TrainerStepResult;

  // One step. `inputs` are host tensors in model input order, validated
  // against the model and with the same dim 0 > 0 (see BindInputs);
  // `targets` has that many rows. On any error (e.g. a label out of range,
  // InvalidArgument naming it) nothing is updated. With ranks, every rank
  // steps on the same whole batch (or, other than rank 0, its rows of it:
  // StepRows) and runs its own slots' rows; `slices` are then this rank's
  // (slot indices its own, rows the batch's), and a step that fails on one
  // rank fails on all.
  absl::StatusOr<StepResult> Step(const std::vector<Tensor>& inputs,
                                  const Tensor& targets) override;

  // Alone (no ranks), each step's slots on devices other than the host
  // upload the upcoming batch's rows (as this trainer will split it) while
  // their own slice computes, into a second set of buffers per slot (a
  // slot without room for them copies as ever); a job of ranks uploads
  // nothing ahead.
  void ExpectBatchesFrom(std::shared_ptr<const UpcomingBatches> upcoming) override;

  // Step's checks of a batch, without stepping: rank 0 checks the whole
  // batch before it hands the other ranks their rows.
  absl::Status Validate(const std::vector<Tensor>& inputs, const Tensor& targets) const override;

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

  int64_t step() const override;
  const TrainingGraph& training_graph() const;
  const Model& model() const;
  // The current weights of `slot` (host copies), in parameter order, and its
  // buffers (running statistics) in buffer order. Fails, with the device's
  // error, when a copy from a device fails.
  absl::StatusOr<std::vector<Tensor>> SlotParameters(int slot) const;
  absl::StatusOr<std::vector<Tensor>> SlotBuffers(int slot) const;
  // Slot 0's optimizer state (every slot holds the same), and with fp16 the
  // loss scale's (LossScaler::State), for checkpoints. Fails when a GPU copy
  // fails.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> OptimizerState() const override;
  // Resumes from a checkpoint: the step count, the optimizer state on every
  // slot (empty `state`: the optimizer starts fresh) and with fp16 the loss
  // scale (where `state` has it; entries of it are ignored without fp16).
  // Fails as Optimizer::Restore and LossScaler::Restore do, changing nothing.
  absl::Status Resume(int64_t step,
                      const std::vector<std::pair<std::string, Tensor>>& state) override;
  // The model with the current weights: the training model's graph with its
  // parameters replaced (not optimised for inference). Fails as
  // SlotParameters does: a failed copy is never taken for the weights.
  absl::StatusOr<std::shared_ptr<const Model>> CurrentModel() const override;

 private:
  // The slots, the reduction, the ranks and the step count
  // (data_parallel_trainer.cc).
  class Impl;
  explicit DataParallelTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_DATA_PARALLEL_TRAINER_H_
