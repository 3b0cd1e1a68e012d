#ifndef REPLICAD_SERVER_MODEL_TRAINING_H_
#define REPLICAD_SERVER_MODEL_TRAINING_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/serve/replica_set.h"
#include "core/train/checkpoint.h"
#include "core/train/data_parallel_trainer.h"
#include "replicad/v1/replicad.pb.h"
#include "server/model_sources.h"
#include "server/replica_set_factory.h"

namespace replicad {

// One served model's training: its configuration, the trainer (made on the
// first TrainStep, on slots of its own on the serving devices), checkpoints,
// and the replica set that Predict uses once training has changed the
// weights. Thread-safe; steps run one at a time.
//
// Predict sees the weights of one whole step: the trainer hands out a copy
// made between steps, from which a new replica set (optimised for
// inference) is built on the first Predict after a step; requests already
// running keep the set they started on.
class ModelTraining {
 public:
  struct Environment {
    ModelSource source;  // Where the model came from (empty path: the embedded default).
    std::vector<DeviceInfo> devices;
    ServingOptions options;
    SliceObserver* observer = nullptr;
  };
  explicit ModelTraining(Environment environment);

  // Validates `config` and fills in its defaults; InvalidArgument naming the
  // field (e.g. "config.optimizer.learning_rate"), Unimplemented for the
  // `ps` reduction. A new configuration rebuilds the trainer from the current
  // weights, keeping the step count but not the optimizer's state.
  absl::StatusOr<v1::TrainingConfig> Configure(const v1::TrainingConfig& config);
  v1::TrainingConfig config() const;
  // The slots training runs on (the serving slots), in slot order.
  const std::vector<SlotAssignment>& slots() const { return environment_.options.slots; }

  // One data-parallel step (see DataParallelTrainer::Step). Fails as the
  // trainer does, and FailedPrecondition/Unimplemented (naming the op) when
  // the model cannot be trained; Predict keeps working either way.
  absl::StatusOr<DataParallelTrainer::StepResult> Step(const std::vector<Tensor>& inputs,
                                                       const Tensor& targets);

  // The replica set holding the latest trained weights; nullptr before the
  // first step (Predict then uses the serving set).
  absl::StatusOr<std::shared_ptr<ReplicaSet>> PredictReplicas();

  // Writes the trained model to `path` (empty: config.checkpoint_dir/NAME.onnx)
  // with its optimizer state beside it; returns the path and the step.
  absl::StatusOr<std::pair<std::string, int64_t>> SaveCheckpoint(const std::string& path);

 private:
  // Loads the model as written (and a checkpoint's step and optimizer state).
  absl::Status LoadModel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureTrainer(DType target_dtype) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::pair<std::string, int64_t>> SaveLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Environment environment_;
  mutable absl::Mutex mu_;
  v1::TrainingConfig config_ ABSL_GUARDED_BY(mu_);
  // The model as written (no inference optimisations), with the latest weights.
  std::shared_ptr<const Model> model_ ABSL_GUARDED_BY(mu_);
  std::string source_bytes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DataParallelTrainer> trainer_ ABSL_GUARDED_BY(mu_);
  std::optional<Checkpoint> resume_ ABSL_GUARDED_BY(mu_);  // Until the trainer takes it.
  int64_t published_step_ ABSL_GUARDED_BY(mu_) = 0;

  // Taken before mu_ when both are held.
  absl::Mutex predict_mu_;
  std::shared_ptr<ReplicaSet> predict_set_ ABSL_GUARDED_BY(predict_mu_);
  int64_t predict_step_ ABSL_GUARDED_BY(predict_mu_) = 0;
  // Replaced sets that Predicts in flight may still hold (see PredictReplicas).
  std::vector<std::shared_ptr<ReplicaSet>> retired_sets_ ABSL_GUARDED_BY(predict_mu_);
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_MODEL_TRAINING_H_
