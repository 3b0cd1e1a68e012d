#ifndef REPLICAD_SERVER_MODEL_TRAINING_H_
#define REPLICAD_SERVER_MODEL_TRAINING_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/serve/replica_set.h"
#include "core/serve/retirer.h"
#include "core/serve/trainable.h"
#include "core/serve/worker_pool.h"
#include "core/train/checkpoint.h"
#include "core/train/data_parallel_trainer.h"
#include "replicad/v1/replicad.pb.h"
#include "server/checkpoint_root.h"
#include "server/model_sources.h"
#include "server/ranks/rank_job.h"
#include "server/replica_set_factory.h"

namespace replicad {

// One served model version's training: its configuration, the trainer
// (made on the first TrainStep, on slots of its own on the serving
// devices), checkpoints, and the replica set that Predict uses once
// training has changed the weights. Thread-safe. Everything it does runs on
// its own thread, one task at a time, so no protocol thread waits on it.
//
// Predict sees the weights of one whole step: the trainer hands out a copy
// made between steps, from which this thread builds a new replica set
// (optimised for inference) when a Predict asks after a step; requests
// already running keep the set they started on.
class ModelTraining final : public Trainable {
 public:
  struct Environment {
    ModelSource source;  // Where the model came from (empty path: the embedded default).
    std::vector<DeviceInfo> devices;
    ServingOptions options;
    SliceObserver* observer = nullptr;
    Retirer* retirer = nullptr;  // Frees replaced predict sets; must outlive this.
    // Where checkpoints may be written (SaveCheckpoint's path and
    // config.checkpoint_dir resolve under it); off by default.
    CheckpointRoot checkpoints;
    // Numbered checkpoints (periodic, or SaveCheckpoint without a path) kept
    // per model; older ones are removed (server/checkpoint_rotation.h).
    int keep_checkpoints = 5;
    // A job of several ranks (mpirun, srun): the trainer splits every step
    // over all ranks' slots; rank 0 hands its configurations and steps to
    // the others (rank_job.h), and only it writes checkpoints. Null: this
    // process trains alone.
    std::shared_ptr<RankJob> job;
    // With a job: every rank takes its own shard of each step from its own
    // clients (--rank-shards), instead of rank 0 taking whole batches.
    bool rank_shards = false;
  };
  explicit ModelTraining(Environment environment);
  // Finishes the queued tasks.
  ~ModelTraining() override;

  // The configuration as applied and the steps taken so far.
  using ConfigDone = absl::AnyInvocable<void(absl::StatusOr<v1::TrainingConfig>, int64_t step) &&>;
  // Validates `config` and fills in its defaults; InvalidArgument naming the
  // field (e.g. "config.optimizer.learning_rate", or an enum value out of
  // range); config.checkpoint_dir as CheckpointRoot::Resolve refuses it. A
  // new configuration rebuilds the trainer from the current weights, keeping
  // the step count but not the optimizer's state.
  // In a job of several ranks (Environment::job), only rank 0 takes its
  // clients' configurations (FailedPrecondition elsewhere) and hands them to
  // the others, unless the job trains from per-rank shards: then each rank
  // is configured by its own client, and the ranks must agree.
  void Configure(v1::TrainingConfig config, ConfigDone done);
  // Another rank's: rank 0's configuration, or this rank's rows of rank 0's
  // step, run as rank 0 runs it (server/ranks/rank_worker.h). A step fails
  // FailedPrecondition when this rank does not train with rank 0's
  // configuration (its ConfigureFromRank0 failed, say), naming why.
  struct Rank0Step {
    int64_t first_row = 0;       // The rows are [first_row, first_row + rows)
    int64_t batch = 0;           // of rank 0's batch of `batch` rows.
    uint64_t configuration = 0;  // Rank 0's ConfigurationId.
  };
  void ConfigureFromRank0(v1::TrainingConfig config, ConfigDone done);
  void StepFromRank0(Rank0Step step, std::vector<Tensor> inputs, Tensor targets, StepDone done);

  using SaveDone = absl::AnyInvocable<void(absl::StatusOr<std::pair<std::string, int64_t>>) &&>;
  // Writes the trained model to `path` (empty: a numbered checkpoint in
  // config.checkpoint_dir, see server/checkpoint_rotation.h) with its
  // optimizer state and this training configuration beside it; gives the
  // path and the step. Loading that file again resumes the step count, the
  // optimizer's state and the configuration (periodic checkpoints included,
  // when its checkpoint_dir still resolves under the root).
  void SaveCheckpoint(std::string path, SaveDone done);

  // Trainable. A step fails as the trainer does, and with
  // FailedPrecondition/Unimplemented (naming the op) when the model cannot be
  // trained; Predict keeps working either way. A step that
  // checkpoint_every_steps checkpoints is answered OK whether or not its
  // checkpoint was written (StepResult::checkpoint_path/checkpoint_status).
  // In a job of several ranks, a whole batch goes to rank 0 and a shard to
  // its own rank, as the job was started (Environment::rank_shards); the
  // other ways are FailedPrecondition, and a shard's fields that do not name
  // this rank of this job are InvalidArgument naming them. Without a job a
  // shard is FailedPrecondition.
  void Step(std::vector<Tensor> inputs, Tensor targets, std::optional<TrainShard> shard,
            StepDone done) override;
  void TrainedServable(ServableDone then) override;

 private:
  // Loads the model as written (and a checkpoint's step and optimizer state).
  absl::Status LoadModel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureTrainer(DType target_dtype) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a configuration or a step comes from.
  enum class Origin { kClient, kRank0 };
  void Configure(v1::TrainingConfig config, Origin origin, ConfigDone done);
  void Step(std::vector<Tensor> inputs, Tensor targets, std::optional<TrainShard> shard,
            std::optional<Rank0Step> from_rank0, StepDone done);
  absl::StatusOr<v1::TrainingConfig> ConfigureNow(const v1::TrainingConfig& config, Origin origin);
  absl::StatusOr<DataParallelTrainer::StepResult> StepNow(
      const std::vector<Tensor>& inputs, const Tensor& targets,
      const std::optional<TrainShard>& shard, const std::optional<Rank0Step>& from_rank0);
  // Rank 0 of a job of whole batches: checks the batch (a bad one reaches
  // no other rank), hands every other rank its rows, and steps.
  absl::StatusOr<DataParallelTrainer::StepResult> LeadStepLocked(const std::vector<Tensor>& inputs,
                                                                 const Tensor& targets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `*entered`: the trainer took the shard (before, its failure is this
  // rank's alone, and the caller tells the other ranks).
  absl::StatusOr<DataParallelTrainer::StepResult> ShardStepLocked(const TrainShard& shard,
                                                                  const std::vector<Tensor>& inputs,
                                                                  const Tensor& targets,
                                                                  bool* entered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `step` on the trainer (made for `target_dtype` if need be), then
  // publishes and checkpoints as configured.
  absl::StatusOr<DataParallelTrainer::StepResult> StepLocked(
      DType target_dtype, absl::FunctionRef<absl::StatusOr<DataParallelTrainer::StepResult>()> step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The configuration, less where checkpoints go, as a number the ranks of
  // a job compare.
  uint64_t ConfigurationId() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<Servable>> PublishNow();
  absl::StatusOr<std::pair<std::string, int64_t>> SaveLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A checkpoint's training configuration, as SaveLocked wrote it.
  void RestoreConfig(const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Environment environment_;
  mutable absl::Mutex mu_;
  v1::TrainingConfig config_ ABSL_GUARDED_BY(mu_);
  // Ranks other than 0: how rank 0's latest configuration went here.
  absl::Status configured_from_rank0_ ABSL_GUARDED_BY(mu_);
  // The model as written (no inference optimisations), with the latest weights.
  std::shared_ptr<const Model> model_ ABSL_GUARDED_BY(mu_);
  std::string source_bytes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DataParallelTrainer> trainer_ ABSL_GUARDED_BY(mu_);
  // The targets' dtype trainer_ was made for (its loss's form).
  DType trainer_target_dtype_ ABSL_GUARDED_BY(mu_) = DType::kInt64;
  std::optional<Checkpoint> resume_ ABSL_GUARDED_BY(mu_);  // Until the trainer takes it.
  int64_t published_step_ ABSL_GUARDED_BY(mu_) = 0;
  // Written into every checkpoint, so rotation removes only this run's
  // (server/checkpoint_rotation.h): drawn here, or the loaded checkpoint's.
  std::string run_id_ ABSL_GUARDED_BY(mu_);

  // The set Predict uses and the step its weights are from.
  absl::Mutex predict_mu_;
  std::shared_ptr<Servable> predict_set_ ABSL_GUARDED_BY(predict_mu_);
  int64_t predict_step_ ABSL_GUARDED_BY(predict_mu_) = 0;
  // published_step_, readable without waiting for a step that holds mu_.
  std::atomic<int64_t> trained_step_{0};

  WorkerPool worker_{1};  // Last: its tasks use everything above.
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_MODEL_TRAINING_H_
