#ifndef REPLICAD_CORE_TRAIN_TRAINING_SESSION_H_
#define REPLICAD_CORE_TRAIN_TRAINING_SESSION_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/backends.h"
#include "core/base/worker_pool.h"
#include "core/device/device_map.h"
#include "core/train/checkpoint.h"
#include "core/train/checkpoint_root.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/model_trainer.h"
#include "core/train/rank_job.h"
#include "core/train/trainable.h"
#include "core/train/training_config.h"
#include "core/train/upcoming_batch.h"

namespace replicad {

// One served model version's training: its configuration, the trainer
// (made on the first step, on slots of its own on the serving devices),
// checkpoints, and in a job of several ranks what rank 0 hands the others.
// Thread-safe. Everything it does runs on its own thread, one task at a
// time, so no protocol thread waits on it.
//
// Predict sees the weights of one whole step: the trainer hands out a copy
// made between steps (TrainedWeights), from which the serving side builds
// the servable Predict runs on (core/serve/published_servable.h).
class TrainingSession final : public Trainable {
 public:
  struct Environment {
    std::string model;  // Its name, in messages and rank commands.
    std::string
        path;  // The ONNX file it loads (a checkpoint resumes); empty: the embedded default.
    std::vector<DeviceInfo> devices;
    std::vector<SlotAssignment> slots;  // The serving slots; the trainer gets its own on them.
    SlotOptions slot_options;
    // Where checkpoints may be written (SaveCheckpoint's path and
    // config.checkpoint_dir resolve under it); off by default.
    CheckpointRoot checkpoints;
    // Numbered checkpoints (periodic, or SaveCheckpoint without a path) kept
    // per model; older ones are removed (checkpoint_rotation.h).
    int keep_checkpoints = 5;
    // A job of several ranks (mpirun, srun): the trainer splits every step
    // over all ranks' slots; rank 0 hands its configurations and steps to
    // the others (rank_command.h), and only it writes checkpoints. Null:
    // this process trains alone.
    std::shared_ptr<RankJob> job;
    // With a job: every rank takes its own shard of each step from its own
    // clients (--rank-shards), instead of rank 0 taking whole batches.
    bool rank_shards = false;
    // Makes the trainer for models not trained data-parallel over `slots`
    // (a placed model's pipeline, core/serve/pipeline_trainer.h); null: a
    // DataParallelTrainer. Such a trainer runs in this process alone: with a
    // job, ConfigureTraining is Unimplemented saying so.
    ModelTrainerMaker make_trainer;
  };
  explicit TrainingSession(Environment environment);
  // Finishes the queued tasks.
  ~TrainingSession() override;

  // The configuration as applied and the steps taken so far.
  using ConfigDone = absl::AnyInvocable<void(absl::StatusOr<TrainingConfig>, int64_t step) &&>;
  // Completes `config` (CompleteTrainingConfig's errors) and resolves its
  // checkpoint_dir as CheckpointRoot::Resolve does (FailedPrecondition when
  // it is not a directory). A new configuration rebuilds the trainer from
  // the current weights, keeping the step count but not the optimizer's
  // state. In a job of several ranks, only rank 0 takes its clients'
  // configurations (FailedPrecondition elsewhere) and hands them to the
  // others, unless the job trains from per-rank shards: then each rank is
  // configured by its own client, and the ranks must agree.
  void Configure(TrainingConfig config, ConfigDone done);

  // Another rank's: rank 0's configuration, or this rank's rows of rank 0's
  // step, run as rank 0 runs it (server/ranks/rank_worker.h). A step fails
  // FailedPrecondition when this rank does not train with rank 0's
  // configuration (its ConfigureFromRank0 failed, say), naming why.
  struct Rank0Step {
    int64_t first_row = 0;       // The rows are [first_row, first_row + rows)
    int64_t batch = 0;           // of rank 0's batch of `batch` rows.
    uint64_t configuration = 0;  // Rank 0's TrainingFingerprint.
  };
  void ConfigureFromRank0(TrainingConfig config, ConfigDone done);
  void StepFromRank0(Rank0Step step, std::vector<Tensor> inputs, Tensor targets, StepDone done);

  // Where a checkpoint went and the step it holds.
  struct Saved {
    std::string path;
    int64_t step = 0;
  };
  using SaveDone = absl::AnyInvocable<void(absl::StatusOr<Saved>) &&>;
  // Writes the trained model to `path` (empty: a numbered checkpoint in
  // config.checkpoint_dir, see checkpoint_rotation.h) with its optimizer
  // state and this training configuration beside it. Loading that file
  // again resumes the step count, the optimizer's state and the
  // configuration (periodic checkpoints included, when its checkpoint_dir
  // still resolves under the root).
  void SaveCheckpoint(std::string path, SaveDone done);

  // The model as a client takes it home: the ONNX file SaveCheckpoint would
  // write (its weights and running statistics at the last step, and that
  // step), or, before any step of this daemon, the file it was loaded from.
  struct Exported {
    std::string onnx;
    int64_t step = 0;
    bool trained = false;  // Weights from steps this daemon took.
  };
  using ExportDone = absl::AnyInvocable<void(absl::StatusOr<Exported>) &&>;
  void Export(ExportDone done);

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
  // To the trainer's ModelTrainer::ExpectBatchesFrom.
  void ExpectStep(std::vector<Tensor> inputs, Tensor targets) override;
  void WithdrawExpectedStep(const std::vector<Tensor>& inputs, const Tensor& targets) override;
  int64_t trained_step() const override { return trained_step_.load(); }
  void TrainedWeights(WeightsDone then) override;

 private:
  // Loads the model as written (and a checkpoint's step and optimizer state).
  absl::Status LoadModel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureTrainer(DType target_dtype) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The data-parallel trainer of the current configuration over this
  // session's slots (and a job's ranks, or a parameter server).
  absl::StatusOr<std::unique_ptr<ModelTrainer>> MakeDataParallelTrainer(
      const TrainerOptions& options) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // trainer_ as the data-parallel trainer a job's steps (rows and shards of
  // ranks) need; with a job, it always is one.
  DataParallelTrainer& RanksTrainerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unimplemented for Environment::make_trainer's models in a job of ranks.
  absl::Status TrainsInThisJob() const;
  absl::StatusOr<std::vector<TrainerSlot>> TrainerSlots() const;
  // Where a configuration or a step comes from.
  enum class Origin { kClient, kRank0 };
  void Configure(TrainingConfig config, Origin origin, ConfigDone done);
  void Step(std::vector<Tensor> inputs, Tensor targets, std::optional<TrainShard> shard,
            std::optional<Rank0Step> from_rank0, StepDone done);
  absl::StatusOr<TrainingConfig> ConfigureNow(const TrainingConfig& config, Origin origin);
  absl::StatusOr<TrainerStepResult> StepNow(const std::vector<Tensor>& inputs,
                                            const Tensor& targets,
                                            const std::optional<TrainShard>& shard,
                                            const std::optional<Rank0Step>& from_rank0);
  // A job's step of rank 0's rows on this rank.
  absl::StatusOr<TrainerStepResult> Rank0StepLocked(const Rank0Step& from_rank0,
                                                    const std::vector<Tensor>& inputs,
                                                    const Tensor& targets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank 0 of a job of whole batches: checks the batch (a bad one reaches
  // no other rank), hands every other rank its rows, and steps.
  absl::StatusOr<TrainerStepResult> LeadStepLocked(const std::vector<Tensor>& inputs,
                                                   const Tensor& targets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `*entered`: the trainer took the shard (before, its failure is this
  // rank's alone, and the caller tells the other ranks).
  absl::StatusOr<TrainerStepResult> ShardStepLocked(const TrainShard& shard,
                                                    const std::vector<Tensor>& inputs,
                                                    const Tensor& targets, bool* entered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `step` on the trainer (made for `target_dtype` if need be), then
  // checkpoints as configured.
  absl::StatusOr<TrainerStepResult> StepLocked(
      DType target_dtype, absl::FunctionRef<absl::StatusOr<TrainerStepResult>()> step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The periodic checkpoint of a step just applied, when one is due.
  void CheckpointStepLocked(TrainerStepResult& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Weights> WeightsNow();
  // The model with the latest weights (the trainer's copy while it has one).
  absl::StatusOr<std::shared_ptr<const Model>> CurrentModelLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Saved> SaveLocked(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What SaveLocked and Export write: the current weights, step and
  // configuration, and (SaveLocked's state file) the optimizer's state.
  absl::StatusOr<Checkpoint> CheckpointLocked(bool with_optimizer_state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a save goes: `path`, or the next numbered checkpoint (never
  // another run's).
  absl::StatusOr<CheckpointRoot::Location> SaveTargetLocked(const std::string& path) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A checkpoint's training configuration, as SaveLocked wrote it.
  void RestoreConfig(const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Only rank 0 of a job writes checkpoints.
  bool WritesCheckpoints() const;

  const Environment environment_;
  mutable absl::Mutex mu_;
  TrainingConfig config_ ABSL_GUARDED_BY(mu_);
  // Ranks other than 0: how rank 0's latest configuration went here.
  absl::Status configured_from_rank0_ ABSL_GUARDED_BY(mu_);
  // The model as written (no inference optimisations), with the latest weights.
  std::shared_ptr<const Model> model_ ABSL_GUARDED_BY(mu_);
  std::string source_bytes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ModelTrainer> trainer_ ABSL_GUARDED_BY(mu_);
  // The targets' dtype trainer_ was made for (its loss's form).
  DType trainer_target_dtype_ ABSL_GUARDED_BY(mu_) = DType::kInt64;
  std::optional<Checkpoint> resume_ ABSL_GUARDED_BY(mu_);  // Until the trainer takes it.
  int64_t published_step_ ABSL_GUARDED_BY(mu_) = 0;
  // Written into every checkpoint, so rotation removes only this run's
  // (checkpoint_rotation.h): drawn here, or the loaded checkpoint's.
  std::string run_id_ ABSL_GUARDED_BY(mu_);
  // published_step_ once a step has applied, readable without waiting for
  // a step that holds mu_.
  std::atomic<int64_t> trained_step_{0};
  // The batch a client will step on next, for the trainer to upload ahead.
  const std::shared_ptr<UpcomingBatches> upcoming_ = std::make_shared<UpcomingBatches>();

  WorkerPool worker_{1};  // Last: its tasks use everything above.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_SESSION_H_
