#ifndef REPLICAD_CORE_SERVE_TRAIN_STEP_QUEUE_H_
#define REPLICAD_CORE_SERVE_TRAIN_STEP_QUEUE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/serve/loaded_model.h"
#include "core/serve/request_context.h"
#include "core/serve/request_validation.h"
#include "core/tensor/tensor.h"
#include "core/train/trainable.h"

namespace replicad {

// A training step's request: `inputs` as for InferRequest, plus targets.
struct TrainRequest {
  std::string model;
  int64_t version = 0;
  std::vector<RequestInput> inputs;
  std::optional<RequestInput> targets;
  std::optional<TrainShard> shard;  // One rank's shard of a step (trainable.h).
  std::string model_field = "model";
};

// A TrainRequest found, checked and bound to its model (BindTrainStep),
// ready to queue (TrainBound).
struct BoundTrainStep {
  std::shared_ptr<LoadedModel> model;
  std::vector<Tensor> inputs;  // Model order.
  Tensor targets;
  std::optional<TrainShard> shard;
};

// Where training steps are bound and queued, in two halves, so that a
// stream of steps (TrainStepStream) can hold the next one bound while one
// runs and tell its model it comes next. ServingCore is the one; tests
// stand in for it.
class TrainStepQueue {
 public:
  virtual ~TrainStepQueue() = default;

  // A step's result, or why it failed, with its model when one was found.
  using TrainDone = absl::AnyInvocable<void(absl::StatusOr<DataParallelTrainer::StepResult>,
                                            std::shared_ptr<LoadedModel> model) &&>;

  // Finds `request`'s model and binds its tensors (InvalidArgument naming
  // the field, NotFound for the model, ...; `*found`: the model, when one
  // was found). The tensors view the request's bytes, which `keep_alive`
  // keeps valid (null: the caller keeps them until the step is done).
  virtual absl::StatusOr<BoundTrainStep> BindTrainStep(const TrainRequest& request,
                                                       std::shared_ptr<const void> keep_alive,
                                                       std::shared_ptr<LoadedModel>* found) = 0;
  // Queues a bound step; `done` runs exactly once.
  virtual void TrainBound(BoundTrainStep step, RequestContext context, TrainDone done) = 0;
  // `step` will most likely be queued next: its model's trainer may upload
  // it while the step before computes (Trainable::ExpectStep). Its tensors
  // must own their bytes (BindTrainStep with `keep_alive`).
  virtual void ExpectTrainStep(const BoundTrainStep& step) = 0;
  // It will not come after all: the trainer stops uploading it
  // (Trainable::WithdrawExpectedStep).
  virtual void WithdrawTrainStep(const BoundTrainStep& step) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_TRAIN_STEP_QUEUE_H_
