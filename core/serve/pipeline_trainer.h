#ifndef REPLICAD_CORE_SERVE_PIPELINE_TRAINER_H_
#define REPLICAD_CORE_SERVE_PIPELINE_TRAINER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/placement.h"
#include "core/serve/pipeline_replica.h"
#include "core/train/optimizer.h"
#include "core/train/trainer_options.h"

namespace replicad {

// Training through a pipeline (model parallelism): the model's training
// graph (forward pass, loss, backward pass; training_graph.h) placed over
// the contexts, the forward nodes by the rules, each backward node where the
// forward node whose gradient it computes runs (so each part's parameters
// get their gradients on their own context), the loss where its input is
// computed. It runs as one PipelineReplica: a step's batch flows through
// the parts in micro-batches (GPipe's schedule: every micro-batch forward
// and backward, then one update), the parameters go whole to every
// micro-batch, and the micro-batches' loss and gradient sums add up in
// micro-batch order. The optimizer then updates float32 master weights on
// the host, as DataParallelTrainer's host mode does with the same rule, so a
// step equals one slot's up to float32 summation order (the sums of
// micro-batches against one sum of the batch).
//
// Not thread-safe: one Step at a time.
class PipelineTrainer {
 public:
  // Unimplemented for a model with running statistics (BatchNormalization
  // in training form: each micro-batch would normalise by its own rows) and
  // for a precision other than fp32; the training graph's, the placement's
  // and PipelineReplica::Create's errors otherwise.
  static absl::StatusOr<std::unique_ptr<PipelineTrainer>> Create(
      std::shared_ptr<const Model> model, const std::vector<PlacementRule>& rules,
      const std::vector<SlotAssignment>& contexts, const PipelineReplica::DeviceMaker& make_device,
      const TrainerOptions& options, int micro_batches);

  struct StepResult {
    double loss = 0;   // The batch's mean.
    int64_t step = 0;  // Steps applied, this one included.
  };
  // One step on `inputs` (the model's inputs, rows in dim 0) and `targets`
  // (the loss's, as DataParallelTrainer takes them). Run's errors.
  absl::StatusOr<StepResult> Step(const std::vector<Tensor>& inputs, const Tensor& targets);

  // The trained parameters (host copies) by the model's initializer names.
  std::map<std::string, Tensor> Parameters() const;
  const PipelineReplica& pipeline() const { return *pipeline_; }

 private:
  PipelineTrainer() = default;

  std::vector<std::string> names_;     // Per parameter.
  std::vector<Tensor> parameters_;     // Host master weights, parameter order.
  size_t gradient_outputs_begin_ = 0;  // Index of the first gradient among the outputs.
  int micro_batches_ = 1;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<PipelineReplica> pipeline_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_PIPELINE_TRAINER_H_
