#ifndef REPLICAD_CORE_TRAIN_TRAINABLE_H_
#define REPLICAD_CORE_TRAIN_TRAINABLE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/model/model.h"
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

// The training side of a served model, as the scheduler sees it
// (TrainingSession; tests' stand-ins). Its work runs on a thread of its own
// (steps of a model are serial anyway), never on the caller's, so no
// protocol thread waits for a step. Thread-safe.
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

  // Tells the training side that a step on `inputs` and `targets` (host
  // tensors that own their bytes, bound and checked as Step's) will most
  // likely be queued next, by a client streaming its steps: it may be
  // uploaded to the slots' devices while the step before computes. A hint:
  // nothing changes if it never comes. The default ignores it.
  virtual void ExpectStep(std::vector<Tensor> inputs, Tensor targets) {}
  // The expected step will not come after all (nothing, when another was
  // expected since).
  virtual void WithdrawExpectedStep(const std::vector<Tensor>& inputs, const Tensor& targets) {}

  // Steps that changed the weights so far (a checkpoint's included). Cheap:
  // readable while a step runs.
  virtual int64_t trained_step() const = 0;

  // The weights of the latest step, as a model graph as written (no
  // inference optimisations), and that step; a null model before any step
  // changed them.
  struct Weights {
    std::shared_ptr<const Model> model;
    int64_t step = 0;
  };
  using WeightsDone = absl::AnyInvocable<void(absl::StatusOr<Weights>) &&>;
  // Calls `then` on the training thread, after the steps queued before it.
  virtual void TrainedWeights(WeightsDone then) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINABLE_H_
