#ifndef REPLICAD_CORE_SERVE_TRAINABLE_H_
#define REPLICAD_CORE_SERVE_TRAINABLE_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/serve/servable.h"
#include "core/train/data_parallel_trainer.h"

namespace replicad {

// One rank's shard of a step, in a training job of several ranks where
// each rank takes its own rows (a data loader per rank): the step it is a
// shard of (the job's next, counted from 1), and who sent it.
struct TrainShard {
  int64_t step = 0;
  int rank = 0;
  int world_size = 0;
};

// The training side of a served model, as the serving core sees it. Its work
// runs on a thread of its own (steps of a model are serial anyway), never
// on the caller's, so no protocol thread waits for a step or builds a plan.
// Thread-safe.
class Trainable {
 public:
  virtual ~Trainable() = default;

  using StepDone =
      absl::AnyInvocable<void(absl::StatusOr<DataParallelTrainer::StepResult> result) &&>;
  // Queues one data-parallel step on `inputs` (model order, validated) and
  // `targets` (validated, same dim 0), or with `shard` this rank's shard of
  // one. The tensors' bytes must stay valid until `done`, which runs once
  // on the training thread.
  virtual void Step(std::vector<Tensor> inputs, Tensor targets, std::optional<TrainShard> shard,
                    StepDone done) = 0;

  using ServableDone = absl::AnyInvocable<void(absl::StatusOr<std::shared_ptr<Servable>>) &&>;
  // Hands Predict the servable that holds the latest step's weights (nullptr
  // before the first step: serve the loaded weights). When a step made the
  // published one stale, the training thread builds the new one first and
  // calls `then` there; otherwise `then` runs before this returns.
  virtual void TrainedServable(ServableDone then) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_TRAINABLE_H_
