#ifndef REPLICAD_CORE_TRAIN_MODEL_TRAINER_H_
#define REPLICAD_CORE_TRAIN_MODEL_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/batch_split.h"
#include "core/model/model.h"
#include "core/tensor/tensor.h"
#include "core/train/trainer_options.h"
#include "core/train/training_ranks.h"
#include "core/train/upcoming_batch.h"

namespace replicad {

// One slot's share of a step.
struct TrainerSliceResult {
  BatchSlice slice;
  double compute_seconds = 0;  // Forward and backward.
  double forward_seconds = 0;  // Of which the forward pass and the loss.
  // Its rows were uploaded to the slot's device during the step before.
  bool input_prefetched = false;
};

// What one training step did.
struct TrainerStepResult {
  double loss = 0;                 // Mean over the batch.
  std::optional<double> accuracy;  // Classification losses only.
  int64_t step = 0;                // Steps applied, this one included.
  int64_t samples = 0;
  std::vector<TrainerSliceResult> slices;  // Row order; none where slots do not split the batch.
  // This process's rank in its job (0 when it trains alone), and in a job
  // of whole batches that rank 0 splits, the slices every other rank ran,
  // in rank order (`slices` are this rank's own). Not for shards: each
  // rank answers its own client about its own rows.
  int rank = 0;
  std::vector<RankSlice> other_ranks;
  // Summing the gradients (the host's, the parameter server's) and the update.
  double reduce_seconds = 0;
  double optimizer_seconds = 0;
  // Gradient bytes the reduction took in.
  int64_t reduced_bytes = 0;
  // Non-empty when the step was skipped (NonFiniteSteps::kSkip): why. A
  // skipped step changes nothing (weights, optimizer, running statistics,
  // the step count) and `step` is the count before it.
  std::string skipped;
  // fp16: the loss scale the step's gradients were computed with (a
  // skipped step's too); 0 otherwise.
  float loss_scale = 0;
  // For whoever checkpoints after a step (the trainer does not): the
  // checkpoint written, or why it failed. The step stands either way.
  std::string checkpoint_path;
  absl::Status checkpoint_status;
};

// What a TrainingSession steps: one model's weights and optimizer, trained
// on whole batches. DataParallelTrainer splits each batch over slots that
// each hold the whole model; a pipeline trainer (core/serve) runs the
// model's parts on several slots. Either way a step is exact: what one
// device computes on the whole batch, up to float32 summation order.
// Steps run one at a time.
class ModelTrainer {
 public:
  virtual ~ModelTrainer() = default;

  // One step on host tensors in model input order (rows in dim 0) and the
  // loss's targets (as many rows). InvalidArgument naming what is wrong
  // with the batch (ValidateTrainingBatch), or the step's reason when its
  // loss, a gradient or the update is not finite and
  // TrainerOptions::non_finite_steps refuses it; nothing is updated then.
  virtual absl::StatusOr<TrainerStepResult> Step(const std::vector<Tensor>& inputs,
                                                 const Tensor& targets) = 0;
  // Where the caller will post the batch it expects to step on next, so
  // that a trainer whose slots' memory the host does not read (GPUs) can
  // upload it while the current step computes; a step on that very batch
  // then starts at once (TrainerSliceResult::input_prefetched). A trainer
  // that uploads nothing ahead ignores it (the default). Steps are the
  // same either way.
  virtual void ExpectBatchesFrom(std::shared_ptr<const UpcomingBatches> upcoming) {}
  // Step's checks of a batch, without stepping.
  virtual absl::Status Validate(const std::vector<Tensor>& inputs, const Tensor& targets) const = 0;

  virtual int64_t step() const = 0;
  // The optimizer's state (and fp16's loss scale), for checkpoints.
  virtual absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> OptimizerState() const = 0;
  // Resumes from a checkpoint: the step count and the optimizer's state
  // (empty: it starts fresh). Fails as Optimizer::Restore does, changing nothing.
  virtual absl::Status Resume(int64_t step,
                              const std::vector<std::pair<std::string, Tensor>>& state) = 0;
  // The model with the current weights (not optimised for inference).
  virtual absl::StatusOr<std::shared_ptr<const Model>> CurrentModel() const = 0;
};

// Makes the trainer of a model (imported without inference optimisations)
// for a configuration; the server layer hands one to a TrainingSession for
// models it does not train data-parallel (a placed model's pipeline).
using ModelTrainerMaker = std::function<absl::StatusOr<std::unique_ptr<ModelTrainer>>(
    std::shared_ptr<const Model> model, const TrainerOptions& options)>;

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_MODEL_TRAINER_H_
