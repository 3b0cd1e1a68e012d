#ifndef REPLICAD_CORE_SERVE_PIPELINE_TRAINER_H_
#define REPLICAD_CORE_SERVE_PIPELINE_TRAINER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/placement.h"
#include "core/serve/pipeline_replica.h"
#include "core/train/model_trainer.h"
#include "core/train/optimizer.h"
#include "core/train/trainer_options.h"
#include "core/train/training_graph.h"

namespace replicad {

// Training through a pipeline (model parallelism): the model's training
// graph (forward pass, loss, backward pass; training_graph.h) placed over
// the contexts, each forward node where the model's node of its name is
// placed, each backward node where the forward node whose gradient it
// computes runs (so each part's parameters get their gradients on their
// own context), the loss, and any other node, where its first computed
// input is computed. It runs as one PipelineReplica per copy of the
// contexts (a device map listing several devices per context), the step's
// rows split evenly over the copies (data parallelism over pipelines, the
// copies' sums added in copy order); in each, the rows flow
// through the parts in micro-batches on GPipe's schedule (every
// micro-batch forward and backward, then one update; not 1F1B), the
// parameters go whole to every micro-batch, and the micro-batches' loss,
// correct-count and gradient sums add up in micro-batch order. The
// optimizer then updates float32 master weights on the host with the same
// rule as DataParallelTrainer's host mode, so a step equals one slot's up
// to float32 summation order (the sums of micro-batches against one sum of
// the batch), and bit for bit in one micro-batch. Dropout's masks are
// keyed by the step, the seed and each row's index in the batch, as one
// slot's are, whatever the micro-batch or pipeline. A step whose loss,
// gradients or update are not finite is refused or skipped as
// TrainerOptions::non_finite_steps says, changing nothing.
//
// Not thread-safe: one Step at a time (TrainingSession's).
class PipelineTrainer final : public ModelTrainer {
 public:
  // `context_of`: per node of model->graph(), the context it is placed on
  // (NodeContexts' or an automatic placement's); `copies[k]`: pipeline k's
  // slots, named by their contexts; `micro_batches` 0: four per part. Unimplemented for a model
  // with running statistics (BatchNormalization in training form: each micro-batch would normalise
  // by its own rows) and for fp16 (its loss scaling; bf16 and tf32 mark the
  // training graph's products as data-parallel training does); the training graph's, the
  // placement's and PipelineReplica::Create's errors otherwise.
  static absl::StatusOr<std::unique_ptr<PipelineTrainer>> Create(
      std::shared_ptr<const Model> model, const std::vector<std::string>& context_of,
      const std::vector<std::vector<SlotAssignment>>& copies,
      const PipelineReplica::DeviceMaker& make_device, const TrainerOptions& options,
      int micro_batches);

  // ModelTrainer. A step's `slices` stay empty: the batch is not split
  // over slots, and a part mixes forward and backward nodes (one that reads
  // only forward values runs with them), so the passes are not timed apart.
  absl::StatusOr<TrainerStepResult> Step(const std::vector<Tensor>& inputs,
                                         const Tensor& targets) override;
  absl::Status Validate(const std::vector<Tensor>& inputs, const Tensor& targets) const override;
  int64_t step() const override { return step_; }
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> OptimizerState() const override;
  absl::Status Resume(int64_t step,
                      const std::vector<std::pair<std::string, Tensor>>& state) override;
  absl::StatusOr<std::shared_ptr<const Model>> CurrentModel() const override;

  // The trained parameters (host copies) by the model's initializer names.
  std::map<std::string, Tensor> Parameters() const;
  const PipelineReplica& pipeline(size_t copy = 0) const { return *pipelines_[copy]; }
  size_t pipeline_count() const { return pipelines_.size(); }
  int micro_batches() const { return micro_batches_; }

 private:
  PipelineTrainer() = default;
  // The sums of loss, correct count and gradients over the batch: each
  // copy's rows through its pipeline (at once), added in copy order.
  absl::StatusOr<std::vector<Tensor>> SumOverPipelines(const std::vector<Tensor>& inputs,
                                                       const Tensor& targets, int64_t rows);
  // Why the mean `gradients` (per parameter, parameters_' sizes), or the
  // update they make to `parameters`, are not finite; empty when they are.
  std::string NonFiniteReason(const std::vector<float*>& parameters,
                              const std::vector<const float*>& gradients) const;

  std::shared_ptr<const Model> model_;  // As written; CurrentModel replaces its parameters.
  TrainingGraph training_;
  TrainerOptions::NonFiniteSteps non_finite_steps_ = TrainerOptions::NonFiniteSteps::kRefuse;
  uint64_t seed_ = 0;                  // Keys Dropout's masks, with the step and the row.
  std::vector<Tensor> parameters_;     // Host master weights, parameter order.
  size_t gradient_outputs_begin_ = 0;  // Index of the first gradient among the outputs.
  int micro_batches_ = 1;
  int64_t step_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::unique_ptr<PipelineReplica>> pipelines_;  // One per copy.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_PIPELINE_TRAINER_H_
