#include "core/train/training_session.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/base/client_text.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/model/default_model.h"
#include "core/model/onnx_import.h"
#include "core/train/checkpoint_rotation.h"
#include "core/train/rank_command.h"

namespace replicad {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open model file '", path, "'"));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// What a rank that is not 0 trains with: rank 0 alone writes checkpoints.
TrainingConfig WithoutCheckpoints(TrainingConfig config) {
  config.checkpoint_dir.clear();
  config.checkpoint_every_steps = 0;
  return config;
}

}  // namespace

TrainingSession::TrainingSession(Environment environment)
    : environment_(std::move(environment)), run_id_(NewCheckpointId()) {}

// worker_, the last member, is destroyed first: its queued tasks finish
// while everything they use is still there.
TrainingSession::~TrainingSession() = default;

bool TrainingSession::WritesCheckpoints() const {
  return environment_.job == nullptr || environment_.job->leads();
}

absl::Status TrainingSession::LoadModel() {
  if (model_ != nullptr) return absl::OkStatus();
  const std::string& path = environment_.path;
  REPLICAD_ASSIGN_OR_RETURN(
      std::string bytes,
      path.empty() ? absl::StatusOr<std::string>(DefaultModelOnnxBytes()) : ReadFile(path));
  OnnxImportOptions options;
  options.optimize = false;  // Training needs the graph as written.
  REPLICAD_ASSIGN_OR_RETURN(model_, LoadOnnxBytes(bytes, environment_.model,
                                                  path.empty() ? "<embedded>" : path, options));
  source_bytes_ = std::move(bytes);
  if (path.empty()) return absl::OkStatus();
  // A checkpoint resumes where it stopped: its step, and its optimizer
  // state when that was written for the same step.
  absl::StatusOr<LoadedCheckpoint> checkpoint = ReadCheckpoint(path);
  if (checkpoint.ok() && checkpoint->has_step) {
    published_step_ = checkpoint->checkpoint.step;
    // Training on from one of a run's checkpoints continues that run: its
    // numbered checkpoints rotate as if the daemon had never stopped.
    if (!checkpoint->checkpoint.run_id.empty()) run_id_ = checkpoint->checkpoint.run_id;
    if (checkpoint->state_matches) {
      RestoreConfig(checkpoint->checkpoint.training_config);
      resume_ = std::move(checkpoint->checkpoint);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TrainerSlot>> TrainingSession::TrainerSlots() const {
  std::vector<TrainerSlot> slots;
  for (const SlotAssignment& slot : environment_.slots) {
    const DeviceInfo* info = FindDevice(environment_.devices, slot.device);
    if (info == nullptr)
      return absl::InternalError(absl::StrCat("slot ", slot.name, ": no device"));
    REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                              CreateDevice(*info, environment_.slot_options));
    slots.push_back(TrainerSlot{slot, std::move(device)});
  }
  return slots;
}

absl::StatusOr<std::unique_ptr<ModelTrainer>> TrainingSession::MakeDataParallelTrainer(
    const TrainerOptions& options) const {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<TrainerSlot> slots, TrainerSlots());
  TrainerReduction reduction;
  if (config_.reduction == TrainingConfig::Reduction::kParameterServer) {
    const DeviceId ps = *ParseDeviceId(config_.ps_device);  // Completed: it exists.
    REPLICAD_ASSIGN_OR_RETURN(
        std::unique_ptr<Device> device,
        CreateDevice(*FindDevice(environment_.devices, ps), environment_.slot_options));
    reduction.parameter_server = ParameterServerDevice{ps, std::move(device)};
  }
  reduction.slot_all_reduce = &CreateSlotAllReduce;
  if (environment_.job != nullptr) reduction.ranks = environment_.job->training_ranks();
  REPLICAD_ASSIGN_OR_RETURN(
      std::unique_ptr<DataParallelTrainer> trainer,
      DataParallelTrainer::Create(model_, std::move(slots), options, std::move(reduction)));
  return trainer;
}

DataParallelTrainer& TrainingSession::RanksTrainerLocked() {
  // A job trains data-parallel only (TrainsInThisJob): its trainer is one.
  return static_cast<DataParallelTrainer&>(*trainer_);
}

absl::Status TrainingSession::TrainsInThisJob() const {
  if (!environment_.make_trainer || environment_.job == nullptr) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("model '", environment_.model,
                   "' trains through its own trainer (a placed model's pipeline), in one "
                   "process; a job of several ranks trains data-parallel only: train it "
                   "unplaced, or without ranks"));
}

absl::Status TrainingSession::EnsureTrainer(DType target_dtype) {
  if (trainer_ != nullptr) return absl::OkStatus();
  REPLICAD_RETURN_IF_ERROR(TrainsInThisJob());
  REPLICAD_RETURN_IF_ERROR(LoadModel());
  REPLICAD_ASSIGN_OR_RETURN(config_,
                            CompleteTrainingConfig(config_, *model_, environment_.devices));
  const TrainerOptions options = TrainerOptionsOf(config_, target_dtype);
  absl::StatusOr<std::unique_ptr<ModelTrainer>> trainer =
      environment_.make_trainer ? environment_.make_trainer(model_, options)
                                : MakeDataParallelTrainer(options);
  if (!trainer.ok()) {
    // The optimizer's own messages say "optimizer.x"; the RPC's field is "config.optimizer.x".
    return absl::Status(trainer.status().code(),
                        absl::StrCat("config.", trainer.status().message()));
  }
  // The step count goes on from a checkpoint or an earlier configuration;
  // the optimizer's state only from a checkpoint written with the same kind.
  std::vector<std::pair<std::string, Tensor>> state;
  if (resume_ && resume_->optimizer.kind == options.optimizer.kind)
    state = resume_->optimizer_state;
  resume_.reset();
  if (!(*trainer)->Resume(published_step_, state).ok()) {
    // The checkpoint's state was made under other hyper-parameters (say,
    // momentum 0.9 where the configuration now has none): start it afresh.
    REPLICAD_RETURN_IF_ERROR((*trainer)->Resume(published_step_, {}));
  }
  trainer_ = *std::move(trainer);
  trainer_->ExpectBatchesFrom(upcoming_);
  trainer_target_dtype_ = target_dtype;
  return absl::OkStatus();
}

void TrainingSession::Configure(TrainingConfig config, ConfigDone done) {
  Configure(std::move(config), Origin::kClient, std::move(done));
}

void TrainingSession::ConfigureFromRank0(TrainingConfig config, ConfigDone done) {
  Configure(std::move(config), Origin::kRank0, std::move(done));
}

void TrainingSession::Configure(TrainingConfig config, Origin origin, ConfigDone done) {
  worker_.Submit([this, config = std::move(config), origin, done = std::move(done)]() mutable {
    absl::StatusOr<TrainingConfig> applied = ConfigureNow(config, origin);
    int64_t step = 0;
    {
      absl::MutexLock lock(&mu_);
      step = published_step_;
      if (origin == Origin::kRank0) configured_from_rank0_ = applied.status();
    }
    std::move(done)(std::move(applied), step);
  });
}

absl::StatusOr<TrainingConfig> TrainingSession::ConfigureNow(const TrainingConfig& config,
                                                             Origin origin) {
  REPLICAD_RETURN_IF_ERROR(TrainsInThisJob());
  absl::MutexLock lock(&mu_);
  RankJob* job = environment_.job.get();
  if (job != nullptr && !job->leads() && origin == Origin::kClient && !environment_.rank_shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this is rank ", job->training_ranks()->rank(), " of ", job->training_ranks()->size(),
        " of a training job: configure it through rank 0, which hands the configuration to "
        "every rank"));
  }
  REPLICAD_RETURN_IF_ERROR(LoadModel());
  REPLICAD_ASSIGN_OR_RETURN(TrainingConfig completed,
                            CompleteTrainingConfig(config, *model_, environment_.devices));
  if (!completed.checkpoint_dir.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(
        std::string dir,
        environment_.checkpoints.Resolve(completed.checkpoint_dir, "config.checkpoint_dir"));
    // Refused now rather than failing every periodic checkpoint later.
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("config.checkpoint_dir: '", ClientText(completed.checkpoint_dir),
                       "' is not a directory under the checkpoint root; create it first"));
    }
    completed.checkpoint_dir = dir;
  }
  if (trainer_ != nullptr) {
    // Keep the weights and the step; the optimizer starts over.
    REPLICAD_ASSIGN_OR_RETURN(model_, trainer_->CurrentModel());
    published_step_ = trainer_->step();
    trainer_.reset();
    resume_.reset();
  }
  config_ = WritesCheckpoints() ? completed : WithoutCheckpoints(completed);
  if (job != nullptr && job->leads() && !environment_.rank_shards) {
    // The other ranks train alike. (With per-rank shards each rank is
    // configured by its own client.)
    RankCommand command;
    command.kind = RankCommand::Kind::kConfigure;
    command.model = environment_.model;
    command.config = WithoutCheckpoints(config_);
    absl::MutexLock order(&job->command_order());
    REPLICAD_RETURN_IF_ERROR(job->SendCommand(EncodeRankCommand(command)));
  }
  return config_;
}

void TrainingSession::Step(std::vector<Tensor> inputs, Tensor targets,
                           std::optional<TrainShard> shard, StepDone done) {
  Step(std::move(inputs), std::move(targets), shard, std::nullopt, std::move(done));
}

void TrainingSession::StepFromRank0(Rank0Step step, std::vector<Tensor> inputs, Tensor targets,
                                    StepDone done) {
  Step(std::move(inputs), std::move(targets), std::nullopt, step, std::move(done));
}

void TrainingSession::Step(std::vector<Tensor> inputs, Tensor targets,
                           std::optional<TrainShard> shard, std::optional<Rank0Step> from_rank0,
                           StepDone done) {
  worker_.Submit([this, inputs = std::move(inputs), targets = std::move(targets), shard, from_rank0,
                  done = std::move(done)]() mutable {
    // Expected or not, it is no longer upcoming.
    upcoming_->Forget(inputs, targets);
    std::move(done)(StepNow(inputs, targets, shard, from_rank0));
  });
}

void TrainingSession::ExpectStep(std::vector<Tensor> inputs, Tensor targets) {
  auto batch = std::make_shared<UpcomingBatch>();
  batch->inputs = std::move(inputs);
  batch->targets = std::move(targets);
  upcoming_->Expect(std::move(batch));
}

void TrainingSession::WithdrawExpectedStep(const std::vector<Tensor>& inputs,
                                           const Tensor& targets) {
  upcoming_->Forget(inputs, targets);
}

namespace {

// A step that fails before its trainer takes it still reaches the other
// ranks, which wait for this one's part: with this status.
absl::Status FailedBeforeEntering(const absl::StatusOr<TrainerStepResult>& result) {
  return result.ok() ? absl::InternalError("the step ended before its trainer took it")
                     : result.status();
}

}  // namespace

absl::StatusOr<TrainerStepResult> TrainingSession::StepNow(
    const std::vector<Tensor>& inputs, const Tensor& targets,
    const std::optional<TrainShard>& shard, const std::optional<Rank0Step>& from_rank0) {
  absl::MutexLock lock(&mu_);
  RankJob* job = environment_.job.get();
  if (job == nullptr) {
    if (shard) {
      return absl::FailedPreconditionError(
          "shard: this daemon trains alone (it was not started by mpirun or srun); send the "
          "whole batch without a shard");
    }
    return StepLocked(targets.dtype(), [&] { return trainer_->Step(inputs, targets); });
  }
  if (from_rank0) return Rank0StepLocked(*from_rank0, inputs, targets);
  const int rank = job->training_ranks()->rank();
  const int size = job->training_ranks()->size();
  if (environment_.rank_shards != shard.has_value()) {
    return absl::FailedPreconditionError(
        environment_.rank_shards
            ? absl::StrCat("this job trains from per-rank shards (--rank-shards): send each of "
                           "its ",
                           size,
                           " ranks its own rows of a step, with shard {step, rank, "
                           "world_size}")
            : absl::StrCat("shard: this job takes whole batches at rank 0, which splits them "
                           "over every rank (start the ranks with --rank-shards to send each "
                           "its own rows)"));
  }
  if (shard) {
    bool entered = false;
    absl::StatusOr<TrainerStepResult> result = ShardStepLocked(*shard, inputs, targets, &entered);
    if (!entered) {
      (void)job->training_ranks()->ExchangeShardRows(shard->step, 0, FailedBeforeEntering(result),
                                                     TrainingFingerprint(config_));
    }
    return result;
  }
  if (!job->leads()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this is rank ", rank, " of ", size,
                     " of a training job: send TrainStep to rank 0, which splits the batch over "
                     "every rank"));
  }
  // Rank 0: steps sum in the order sent.
  absl::MutexLock order(&job->command_order());
  return LeadStepLocked(inputs, targets);
}

absl::StatusOr<TrainerStepResult> TrainingSession::Rank0StepLocked(
    const Rank0Step& from_rank0, const std::vector<Tensor>& inputs, const Tensor& targets) {
  bool entered = false;
  absl::StatusOr<TrainerStepResult> result =
      StepLocked(targets.dtype(), [&]() -> absl::StatusOr<TrainerStepResult> {
        // A rank that missed rank 0's configuration would train its copy with
        // another optimizer, and the copies would drift apart unnoticed.
        // (Compared once EnsureTrainer has completed a default configuration.)
        if (TrainingFingerprint(config_) != from_rank0.configuration) {
          return absl::FailedPreconditionError(
              absl::StrCat("this rank does not train with rank 0's configuration",
                           configured_from_rank0_.ok()
                               ? ""
                               : absl::StrCat(": rank 0's ConfigureTraining failed here: ",
                                              configured_from_rank0_.message())));
        }
        entered = true;
        return RanksTrainerLocked().StepRows(from_rank0.first_row, from_rank0.batch, inputs,
                                             targets);
      });
  if (!entered) {
    (void)GatherReadiness(*environment_.job->training_ranks(), FailedBeforeEntering(result), "");
  }
  return result;
}

absl::StatusOr<TrainerStepResult> TrainingSession::LeadStepLocked(const std::vector<Tensor>& inputs,
                                                                  const Tensor& targets) {
  RankJob& job = *environment_.job;
  return StepLocked(targets.dtype(), [&]() -> absl::StatusOr<TrainerStepResult> {
    // A batch that fails the checks fails here alone: no rank sees it.
    REPLICAD_RETURN_IF_ERROR(trainer_->Validate(inputs, targets));
    // Each other rank is sent only its own rows (rank 0's are the first).
    const int64_t batch = inputs[0].shape()[0];
    for (int r = 1; r < job.training_ranks()->size(); ++r) {
      const DataParallelTrainer::RowRange rows = RanksTrainerLocked().RowsOfRank(batch, r);
      RankCommand command;
      command.kind = RankCommand::Kind::kStep;
      command.model = environment_.model;
      command.first_row = rows.first;
      command.batch = batch;
      command.configuration = TrainingFingerprint(config_);
      for (const Tensor& t : inputs) {
        REPLICAD_ASSIGN_OR_RETURN(Tensor part, t.SliceRows(rows.first, rows.end));
        command.inputs.push_back(std::move(part));
      }
      REPLICAD_ASSIGN_OR_RETURN(command.targets, targets.SliceRows(rows.first, rows.end));
      // Once one rank has its rows, the step goes on to the trainer, or the
      // group breaks (a rank that does not take its command).
      REPLICAD_RETURN_IF_ERROR(job.SendCommandTo(r, EncodeRankCommand(command)));
    }
    return trainer_->Step(inputs, targets);
  });
}

absl::StatusOr<TrainerStepResult> TrainingSession::ShardStepLocked(
    const TrainShard& shard, const std::vector<Tensor>& inputs, const Tensor& targets,
    bool* entered) {
  const TrainingRanks& ranks = *environment_.job->training_ranks();
  if (shard.world_size != ranks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("shard.world_size: the job has ", ranks.size(),
                                                   " ranks, received ", shard.world_size));
  }
  if (shard.rank != ranks.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard.rank: this is rank ", ranks.rank(), ", received ", shard.rank));
  }
  if (shard.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard.step: steps count from 1, received ", shard.step));
  }
  const uint64_t configuration = TrainingFingerprint(config_);
  return StepLocked(targets.dtype(), [&] {
    *entered = true;
    return RanksTrainerLocked().StepShard(shard.step, configuration, inputs, targets);
  });
}

absl::StatusOr<TrainerStepResult> TrainingSession::StepLocked(
    DType target_dtype, absl::FunctionRef<absl::StatusOr<TrainerStepResult>()> step) {
  // The targets' dtype picks the loss's form (class labels or
  // probabilities), and a client may change it between steps: the trainer
  // is then made again for the new form, from the current weights, the
  // optimizer's state and the step count, as a checkpoint would resume.
  if (trainer_ != nullptr && trainer_target_dtype_ != target_dtype) {
    REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> current, trainer_->CurrentModel());
    REPLICAD_ASSIGN_OR_RETURN(auto state, trainer_->OptimizerState());
    model_ = std::move(current);
    resume_ = Checkpoint();
    resume_->step = published_step_;
    resume_->optimizer = config_.optimizer;
    resume_->optimizer_state = std::move(state);
    trainer_.reset();
  }
  const bool new_trainer = trainer_ == nullptr;
  const std::optional<Checkpoint> resume = resume_;  // Tensors are shared, not copied.
  REPLICAD_RETURN_IF_ERROR(EnsureTrainer(target_dtype));
  absl::StatusOr<TrainerStepResult> result = step();
  if (!result.ok()) {
    // A trainer made for this request's targets that could not take a step
    // is not kept: the next request, with other targets, gets one of its
    // own, resuming what this one was given.
    if (new_trainer) {
      trainer_.reset();
      resume_ = resume;
    }
    return result;
  }
  if (!result->skipped.empty()) return result;  // Nothing changed: nothing to publish or save.
  published_step_ = result->step;
  trained_step_.store(published_step_);
  CheckpointStepLocked(*result);
  return result;
}

void TrainingSession::CheckpointStepLocked(TrainerStepResult& result) {
  if (config_.checkpoint_every_steps <= 0 || result.step % config_.checkpoint_every_steps != 0) {
    return;
  }
  // The step is applied whatever happens to its checkpoint, so it is
  // answered OK with the failure beside it: an error would make a client
  // retry, and train the batch twice.
  absl::StatusOr<Saved> saved = SaveLocked("");
  if (saved.ok()) {
    result.checkpoint_path = saved->path;
    return;
  }
  result.checkpoint_status = absl::Status(
      saved.status().code(),
      absl::StrCat("step ", result.step,
                   " was applied, but its checkpoint failed: ", saved.status().message()));
  // The client may not look at checkpoint_status; the operator must learn
  // that no checkpoint is being written.
  LogError(absl::StrCat("model '", environment_.model, "': ", result.checkpoint_status.message()));
}

void TrainingSession::TrainedWeights(WeightsDone then) {
  worker_.Submit([this, then = std::move(then)]() mutable { std::move(then)(WeightsNow()); });
}

absl::StatusOr<Trainable::Weights> TrainingSession::WeightsNow() {
  absl::MutexLock lock(&mu_);
  if (model_ == nullptr) return Weights{};
  // Between configurations model_ holds the latest weights.
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> current, CurrentModelLocked());
  return Weights{std::move(current), published_step_};
}

absl::StatusOr<std::shared_ptr<const Model>> TrainingSession::CurrentModelLocked() const {
  if (trainer_ == nullptr) return model_;
  return trainer_->CurrentModel();
}

void TrainingSession::SaveCheckpoint(std::string path, SaveDone done) {
  worker_.Submit([this, path = std::move(path), done = std::move(done)]() mutable {
    absl::StatusOr<Saved> saved;
    {
      absl::MutexLock lock(&mu_);
      saved = SaveLocked(path);
    }
    std::move(done)(std::move(saved));
  });
}

absl::StatusOr<CheckpointRoot::Location> TrainingSession::SaveTargetLocked(
    const std::string& path) const {
  if (!path.empty()) return environment_.checkpoints.Locate(path, "path");
  if (config_.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "path: empty, and no config.checkpoint_dir is configured to write into");
  }
  REPLICAD_ASSIGN_OR_RETURN(
      CheckpointRoot::Location target,
      environment_.checkpoints.Locate(
          NumberedCheckpointPath(config_.checkpoint_dir, environment_.model, published_step_),
          "config.checkpoint_dir"));
  // A numbered name another run wrote (an earlier daemon that reached this
  // step) is that run's checkpoint: kept, never replaced.
  absl::StatusOr<std::string> writer = ReadCheckpointRunId(target.directory, target.name);
  if (!absl::IsNotFound(writer.status()) && (!writer.ok() || *writer != run_id_)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "config.checkpoint_dir: '", target.path,
        "' exists and was not written by this run of training (",
        writer.ok()
            ? (writer->empty() ? std::string("it records no run") : absl::StrCat("run ", *writer))
            : std::string(writer.status().message()),
        "; this run is ", run_id_,
        "); it is kept. Train into another checkpoint_dir, or move it "
        "away"));
  }
  return target;
}

absl::StatusOr<TrainingSession::Saved> TrainingSession::SaveLocked(const std::string& path) {
  // After a restart on a checkpoint nothing has loaded the model yet.
  REPLICAD_RETURN_IF_ERROR(LoadModel());
  REPLICAD_ASSIGN_OR_RETURN(CheckpointRoot::Location target, SaveTargetLocked(path));
  if (published_step_ == 0 || model_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", environment_.model,
                     "' has not taken a training step since it was loaded; nothing to save"));
  }
  REPLICAD_ASSIGN_OR_RETURN(Checkpoint checkpoint, CheckpointLocked(/*with_optimizer_state=*/true));
  REPLICAD_RETURN_IF_ERROR(
      WriteCheckpoint(source_bytes_, target.directory, target.name, checkpoint));
  if (path.empty()) {
    // The new one is whole on disk; only now may older ones go.
    absl::Status pruned = PruneNumberedCheckpoints(target.directory, environment_.model,
                                                   environment_.keep_checkpoints, run_id_,
                                                   {target.path, environment_.path});
    if (!pruned.ok()) {
      LogWarning(absl::StrCat("model '", environment_.model,
                              "': removing old checkpoints: ", pruned.message()));
    }
  }
  return Saved{target.path, checkpoint.step};
}

absl::StatusOr<Checkpoint> TrainingSession::CheckpointLocked(bool with_optimizer_state) {
  Checkpoint checkpoint;
  checkpoint.step = published_step_;
  checkpoint.optimizer = config_.optimizer;
  // The weights and running statistics (every float initializer of the
  // current model), and the optimizer's state when a trainer holds one
  // (not between a new configuration and its first step). A failed copy is
  // never written.
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> current, CurrentModelLocked());
  const Graph& graph = current->graph();
  for (const auto& [v, tensor] : graph.initializers) {
    if (tensor.dtype() == DType::kFloat32)
      checkpoint.parameters.emplace(graph.values[v].name, tensor);
  }
  // The optimizer's state goes only into the state file: a download leaves
  // it, and its copies from the devices, out.
  if (with_optimizer_state && trainer_ != nullptr) {
    REPLICAD_ASSIGN_OR_RETURN(checkpoint.optimizer_state, trainer_->OptimizerState());
  } else if (with_optimizer_state && resume_) {
    // Saved after a restart, before a step: the state it resumes with.
    checkpoint.optimizer = resume_->optimizer;
    checkpoint.optimizer_state = resume_->optimizer_state;
  }
  checkpoint.training_config = FormatTrainingConfig(config_);
  checkpoint.run_id = run_id_;
  return checkpoint;
}

void TrainingSession::Export(ExportDone done) {
  worker_.Submit([this, done = std::move(done)]() mutable {
    absl::StatusOr<Exported> exported = [&]() -> absl::StatusOr<Exported> {
      absl::MutexLock lock(&mu_);
      REPLICAD_RETURN_IF_ERROR(LoadModel());
      // Before a step of this daemon's the weights are the file's.
      if (trained_step_.load() == 0) return Exported{source_bytes_, published_step_, false};
      REPLICAD_ASSIGN_OR_RETURN(Checkpoint checkpoint,
                                CheckpointLocked(/*with_optimizer_state=*/false));
      REPLICAD_ASSIGN_OR_RETURN(std::string onnx, CheckpointOnnxBytes(source_bytes_, checkpoint));
      return Exported{std::move(onnx), checkpoint.step, true};
    }();
    std::move(done)(std::move(exported));
  });
}

void TrainingSession::RestoreConfig(const std::string& text) {
  if (text.empty()) return;
  absl::StatusOr<TrainingConfig> config = ParseTrainingConfig(text);
  if (!config.ok()) {
    LogWarning(absl::StrCat("model '", environment_.model,
                            "': the checkpoint's training configuration does not parse (",
                            config.status().message(), "); training starts from the defaults"));
    return;
  }
  if (!config->checkpoint_dir.empty()) {
    // The root may differ from the one it was written under, or be off.
    absl::StatusOr<std::string> dir =
        environment_.checkpoints.Resolve(config->checkpoint_dir, "config.checkpoint_dir");
    if (!dir.ok()) {
      LogWarning(absl::StrCat(
          "model '", environment_.model,
          "': periodic checkpoints stay off after the restart: ", dir.status().message()));
      *config = WithoutCheckpoints(*std::move(config));
    }
  }
  // A job restarted on a checkpoint: only rank 0 writes the next ones.
  config_ = WritesCheckpoints() ? *std::move(config) : WithoutCheckpoints(*std::move(config));
}

}  // namespace replicad
