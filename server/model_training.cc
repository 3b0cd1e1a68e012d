#include "server/model_training.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/base/log.h"
#include "core/model/default_model.h"
#include "core/model/graph_optimizer.h"
#include "core/model/onnx_import.h"
#include "core/serve/client_text.h"
#include "core/train/checkpoint.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "server/checkpoint_rotation.h"
#include "server/ranks/rank_command.h"

namespace replicad {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open model file '", path, "'"));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// InvalidArgument naming `field` when `value` is not one of the enum's
// values (proto3 keeps unknown numbers, e.g. a client's optimizer kind 99).
absl::Status CheckEnum(const google::protobuf::EnumDescriptor* descriptor, int value,
                       const char* field) {
  if (descriptor->FindValueByNumber(value) != nullptr) return absl::OkStatus();
  std::string names;
  for (int i = 0; i < descriptor->value_count(); ++i) {
    absl::StrAppend(&names, i == 0 ? "" : ", ", descriptor->value(i)->name());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected one of ", names, "; received ", value));
}

// `config` with PyTorch's defaults filled in, or InvalidArgument naming the field.
absl::StatusOr<v1::TrainingConfig> Complete(v1::TrainingConfig config, const Model& model,
                                            const std::vector<DeviceInfo>& devices) {
  for (const absl::Status& status :
       {CheckEnum(v1::Loss_descriptor(), config.loss(), "config.loss"),
        CheckEnum(v1::OptimizerKind_descriptor(), config.optimizer().kind(),
                  "config.optimizer.kind"),
        CheckEnum(v1::GradientReduction_descriptor(), config.reduction(), "config.reduction"),
        CheckEnum(v1::NonFiniteSteps_descriptor(), config.non_finite_steps(),
                  "config.non_finite_steps")}) {
    if (!status.ok()) return status;
  }
  if (config.loss() == v1::LOSS_UNSPECIFIED) config.set_loss(v1::LOSS_SOFTMAX_CROSS_ENTROPY);
  if (config.non_finite_steps() == v1::NON_FINITE_STEPS_UNSPECIFIED) {
    config.set_non_finite_steps(v1::NON_FINITE_STEPS_REFUSE);
  }
  if (config.output().empty()) config.set_output(model.outputs()[0].name);
  if (model.OutputIndex(config.output()) < 0) {
    std::string names;
    for (const TensorSpec& s : model.outputs())
      absl::StrAppend(&names, names.empty() ? "" : ", ", s.name);
    return absl::InvalidArgumentError(absl::StrCat("config.output: model '", model.name(),
                                                   "' has no output '", ClientText(config.output()),
                                                   "'; expected one of: ", names));
  }
  v1::OptimizerConfig* o = config.mutable_optimizer();
  if (o->kind() == v1::OPTIMIZER_UNSPECIFIED) o->set_kind(v1::OPTIMIZER_SGD);
  const OptimizerConfig defaults;
  if (!o->has_learning_rate()) o->set_learning_rate(defaults.learning_rate);
  if (!o->has_momentum()) o->set_momentum(defaults.momentum);
  if (!o->has_weight_decay()) o->set_weight_decay(defaults.weight_decay);
  if (!o->has_beta1()) o->set_beta1(defaults.beta1);
  if (!o->has_beta2()) o->set_beta2(defaults.beta2);
  if (!o->has_epsilon()) o->set_epsilon(defaults.epsilon);
  if (!o->has_alpha()) o->set_alpha(defaults.alpha);
  if (!config.has_sync_batch_norm()) config.set_sync_batch_norm(true);
  if (config.reduction() == v1::GRADIENT_REDUCTION_UNSPECIFIED) {
    config.set_reduction(v1::GRADIENT_REDUCTION_ALLREDUCE);
  }
  if (config.reduction() == v1::GRADIENT_REDUCTION_PS) {
    if (config.ps_device().empty()) {
      return absl::InvalidArgumentError(
          "config.ps_device must name the parameter server's device (e.g. cpu:0) for "
          "reduction 'ps'");
    }
    absl::StatusOr<DeviceId> ps = ParseDeviceId(config.ps_device());
    if (!ps.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("config.ps_device: ", ps.status().message()));
    }
    if (FindDevice(devices, *ps) == nullptr) {
      std::string names;
      for (const DeviceInfo& d : devices) {
        absl::StrAppend(&names, names.empty() ? "" : ", ", DeviceIdToString(d.id));
      }
      return absl::InvalidArgumentError(absl::StrCat("config.ps_device: '",
                                                     ClientText(config.ps_device()),
                                                     "' does not exist; available: ", names));
    }
  } else if (!config.ps_device().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.ps_device is only for reduction 'ps'; received '",
                     ClientText(config.ps_device()), "' with allreduce"));
  }
  if (config.checkpoint_every_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.checkpoint_every_steps must be >= 0, received ", config.checkpoint_every_steps()));
  }
  if (config.checkpoint_every_steps() > 0 && config.checkpoint_dir().empty()) {
    return absl::InvalidArgumentError(
        "config.checkpoint_dir must be set when config.checkpoint_every_steps > 0");
  }
  return config;
}

OptimizerConfig ToOptimizerConfig(const v1::OptimizerConfig& o) {
  OptimizerConfig c;
  c.kind = o.kind() == v1::OPTIMIZER_ADAM      ? OptimizerConfig::Kind::kAdam
           : o.kind() == v1::OPTIMIZER_RMSPROP ? OptimizerConfig::Kind::kRmsprop
                                               : OptimizerConfig::Kind::kSgd;
  c.learning_rate = static_cast<float>(o.learning_rate());
  c.momentum = static_cast<float>(o.momentum());
  c.nesterov = o.nesterov();
  c.weight_decay = static_cast<float>(o.weight_decay());
  c.beta1 = static_cast<float>(o.beta1());
  c.beta2 = static_cast<float>(o.beta2());
  c.epsilon = static_cast<float>(o.epsilon());
  c.alpha = static_cast<float>(o.alpha());
  return c;
}

// The optimizer's own messages say "optimizer.x"; the RPC's field is "config.optimizer.x".
absl::Status InConfig(const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("config.", status.message()));
}

}  // namespace

ModelTraining::ModelTraining(Environment environment)
    : environment_(std::move(environment)), run_id_(NewCheckpointId()) {}

// worker_, the last member, is destroyed first: its queued tasks finish
// while everything they use is still there.
ModelTraining::~ModelTraining() = default;

absl::Status ModelTraining::LoadModel() {
  if (model_ != nullptr) return absl::OkStatus();
  const ModelSource& source = environment_.source;
  absl::StatusOr<std::string> bytes = source.path.empty()
                                          ? absl::StatusOr<std::string>(DefaultModelOnnxBytes())
                                          : ReadFile(source.path);
  if (!bytes.ok()) return bytes.status();
  OnnxImportOptions options;
  options.optimize = false;  // Training needs the graph as written.
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxBytes(*bytes, source.name, source.path.empty() ? "<embedded>" : source.path, options);
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
  source_bytes_ = *std::move(bytes);
  if (!source.path.empty()) {
    // A checkpoint resumes where it stopped: its step, and its optimizer
    // state when that was written for the same step.
    absl::StatusOr<LoadedCheckpoint> checkpoint = ReadCheckpoint(source.path);
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
  }
  return absl::OkStatus();
}

absl::Status ModelTraining::EnsureTrainer(DType target_dtype) {
  if (trainer_ != nullptr) return absl::OkStatus();
  if (absl::Status s = LoadModel(); !s.ok()) return s;
  absl::StatusOr<v1::TrainingConfig> config = Complete(config_, *model_, environment_.devices);
  if (!config.ok()) return config.status();
  config_ = *config;
  TrainerOptions options;
  options.loss.kind = config_.loss() == v1::LOSS_MEAN_SQUARED_ERROR
                          ? LossSpec::Kind::kMeanSquaredError
                          : LossSpec::Kind::kSoftmaxCrossEntropy;
  options.loss.output = config_.output();
  options.loss.target_dtype = target_dtype;
  options.optimizer = ToOptimizerConfig(config_.optimizer());
  options.sync_batch_norm = config_.sync_batch_norm();
  options.seed = config_.seed();
  options.non_finite_steps = config_.non_finite_steps() == v1::NON_FINITE_STEPS_SKIP
                                 ? TrainerOptions::NonFiniteSteps::kSkip
                                 : TrainerOptions::NonFiniteSteps::kRefuse;
  std::vector<TrainerSlot> slots;
  for (const SlotAssignment& slot : environment_.options.slots) {
    const DeviceInfo* info = FindDevice(environment_.devices, slot.device);
    if (info == nullptr)
      return absl::InternalError(absl::StrCat("slot ", slot.name, ": no device"));
    absl::StatusOr<std::unique_ptr<Device>> device =
        CreateDevice(*info, environment_.options.slot_options);
    if (!device.ok()) return device.status();
    slots.push_back(TrainerSlot{slot, *std::move(device)});
  }
  std::optional<ParameterServerDevice> parameter_server;
  if (config_.reduction() == v1::GRADIENT_REDUCTION_PS) {
    const DeviceId ps = *ParseDeviceId(config_.ps_device());  // Complete checked it.
    absl::StatusOr<std::unique_ptr<Device>> device =
        CreateDevice(*FindDevice(environment_.devices, ps), environment_.options.slot_options);
    if (!device.ok()) return device.status();
    parameter_server = ParameterServerDevice{ps, *std::move(device)};
  }
  TrainerReduction reduction;
  reduction.parameter_server = std::move(parameter_server);
  reduction.slot_all_reduce = &CreateSlotAllReduce;
  if (environment_.job != nullptr) reduction.ranks = environment_.job->training_ranks();
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
      DataParallelTrainer::Create(model_, std::move(slots), options, std::move(reduction));
  if (!trainer.ok()) return InConfig(trainer.status());
  // The step count goes on from a checkpoint or an earlier configuration;
  // the optimizer's state only from a checkpoint written with the same kind.
  std::vector<std::pair<std::string, Tensor>> state;
  if (resume_ && resume_->optimizer.kind == options.optimizer.kind)
    state = resume_->optimizer_state;
  resume_.reset();
  if (!(*trainer)->Resume(published_step_, state).ok()) {
    // The checkpoint's state was made under other hyper-parameters (say,
    // momentum 0.9 where the configuration now has none): start it afresh.
    if (absl::Status s = (*trainer)->Resume(published_step_, {}); !s.ok()) return s;
  }
  trainer_ = *std::move(trainer);
  trainer_target_dtype_ = target_dtype;
  return absl::OkStatus();
}

void ModelTraining::Configure(v1::TrainingConfig config, ConfigDone done) {
  Configure(std::move(config), Origin::kClient, std::move(done));
}

void ModelTraining::ConfigureFromRank0(v1::TrainingConfig config, ConfigDone done) {
  Configure(std::move(config), Origin::kRank0, std::move(done));
}

void ModelTraining::Configure(v1::TrainingConfig config, Origin origin, ConfigDone done) {
  worker_.Submit([this, config = std::move(config), origin, done = std::move(done)]() mutable {
    absl::StatusOr<v1::TrainingConfig> applied = ConfigureNow(config, origin);
    int64_t step = 0;
    {
      absl::MutexLock lock(&mu_);
      step = published_step_;
      if (origin == Origin::kRank0) configured_from_rank0_ = applied.status();
    }
    std::move(done)(std::move(applied), step);
  });
}

absl::StatusOr<v1::TrainingConfig> ModelTraining::ConfigureNow(const v1::TrainingConfig& config,
                                                               Origin origin) {
  absl::MutexLock lock(&mu_);
  RankJob* job = environment_.job.get();
  if (job != nullptr && !job->leads() && origin == Origin::kClient && !environment_.rank_shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this is rank ", job->training_ranks()->rank(), " of ", job->training_ranks()->size(),
        " of a training job: configure it through rank 0, which hands the configuration to "
        "every rank"));
  }
  if (absl::Status s = LoadModel(); !s.ok()) return s;
  absl::StatusOr<v1::TrainingConfig> completed = Complete(config, *model_, environment_.devices);
  if (!completed.ok()) return completed.status();
  if (!completed->checkpoint_dir().empty()) {
    absl::StatusOr<std::string> dir =
        environment_.checkpoints.Resolve(completed->checkpoint_dir(), "config.checkpoint_dir");
    if (!dir.ok()) return dir.status();
    // Refused now rather than failing every periodic checkpoint later.
    struct stat st;
    if (::stat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("config.checkpoint_dir: '", ClientText(completed->checkpoint_dir()),
                       "' is not a directory under the checkpoint root; create it first"));
    }
    completed->set_checkpoint_dir(*dir);
  }
  if (absl::Status s = InConfig(ValidateOptimizerConfig(ToOptimizerConfig(completed->optimizer())));
      !s.ok()) {
    return s;
  }
  if (trainer_ != nullptr) {
    // Keep the weights and the step; the optimizer starts over.
    absl::StatusOr<std::shared_ptr<const Model>> current = trainer_->CurrentModel();
    if (!current.ok()) return current.status();
    model_ = *std::move(current);
    published_step_ = trainer_->step();
    trainer_.reset();
    resume_.reset();
  }
  config_ = *completed;
  if (job != nullptr && !job->leads()) {
    // Only rank 0 writes checkpoints.
    config_.clear_checkpoint_dir();
    config_.set_checkpoint_every_steps(0);
  }
  if (job != nullptr && job->leads() && !environment_.rank_shards) {
    // The other ranks train alike; only this one writes checkpoints. (With
    // per-rank shards each rank is configured by its own client.)
    RankCommand command;
    command.kind = RankCommand::Kind::kConfigure;
    command.model = environment_.source.name;
    command.config = config_;
    command.config.clear_checkpoint_dir();
    command.config.set_checkpoint_every_steps(0);
    absl::MutexLock order(&environment_.job->command_order());
    if (absl::Status s = environment_.job->SendCommand(EncodeRankCommand(command)); !s.ok()) {
      return s;
    }
  }
  return config_;
}

void ModelTraining::Step(std::vector<Tensor> inputs, Tensor targets,
                         std::optional<TrainShard> shard, StepDone done) {
  Step(std::move(inputs), std::move(targets), shard, std::nullopt, std::move(done));
}

void ModelTraining::StepFromRank0(Rank0Step step, std::vector<Tensor> inputs, Tensor targets,
                                  StepDone done) {
  Step(std::move(inputs), std::move(targets), std::nullopt, step, std::move(done));
}

void ModelTraining::Step(std::vector<Tensor> inputs, Tensor targets,
                         std::optional<TrainShard> shard, std::optional<Rank0Step> from_rank0,
                         StepDone done) {
  worker_.Submit([this, inputs = std::move(inputs), targets = std::move(targets), shard, from_rank0,
                  done = std::move(done)]() mutable {
    std::move(done)(StepNow(inputs, targets, shard, from_rank0));
  });
}

absl::StatusOr<DataParallelTrainer::StepResult> ModelTraining::StepNow(
    const std::vector<Tensor>& inputs, const Tensor& targets,
    const std::optional<TrainShard>& shard, const std::optional<Rank0Step>& from_rank0) {
  absl::MutexLock lock(&mu_);
  RankJob* job = environment_.job.get();
  auto step = [&] { return trainer_->Step(inputs, targets); };
  if (job == nullptr) {
    if (shard) {
      return absl::FailedPreconditionError(
          "shard: this daemon trains alone (it was not started by mpirun or srun); send the "
          "whole batch without a shard");
    }
    return StepLocked(targets.dtype(), step);
  }
  const int rank = job->training_ranks()->rank();
  const int size = job->training_ranks()->size();
  // A step that fails before its trainer takes it still reaches the other
  // ranks, which wait for this one's part; `entered`: the trainer took it.
  bool entered = false;
  const auto failed = [](const absl::StatusOr<DataParallelTrainer::StepResult>& result) {
    return result.ok() ? absl::InternalError("the step ended before its trainer took it")
                       : result.status();
  };
  if (from_rank0) {
    absl::StatusOr<DataParallelTrainer::StepResult> result =
        StepLocked(targets.dtype(), [&]() -> absl::StatusOr<DataParallelTrainer::StepResult> {
          // A rank that missed rank 0's configuration would train its copy with
          // another optimizer, and the copies would drift apart unnoticed.
          // (Compared once EnsureTrainer has completed a default configuration.)
          if (ConfigurationId() != from_rank0->configuration) {
            return absl::FailedPreconditionError(
                absl::StrCat("this rank does not train with rank 0's configuration",
                             configured_from_rank0_.ok()
                                 ? ""
                                 : absl::StrCat(": rank 0's ConfigureTraining failed here: ",
                                                configured_from_rank0_.message())));
          }
          entered = true;
          return trainer_->StepRows(from_rank0->first_row, from_rank0->batch, inputs, targets);
        });
    if (!entered) (void)GatherReadiness(*job->training_ranks(), failed(result), "");
    return result;
  }
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
    absl::StatusOr<DataParallelTrainer::StepResult> result =
        ShardStepLocked(*shard, inputs, targets, &entered);
    if (!entered) {
      (void)job->training_ranks()->ExchangeShardRows(shard->step, 0, failed(result),
                                                     ConfigurationId());
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

absl::StatusOr<DataParallelTrainer::StepResult> ModelTraining::LeadStepLocked(
    const std::vector<Tensor>& inputs, const Tensor& targets) {
  RankJob& job = *environment_.job;
  return StepLocked(targets.dtype(), [&]() -> absl::StatusOr<DataParallelTrainer::StepResult> {
    // A batch that fails the checks fails here alone: no rank sees it.
    if (absl::Status s = trainer_->Validate(inputs, targets); !s.ok()) return s;
    // Each other rank is sent only its own rows (rank 0's are the first).
    const int64_t batch = inputs[0].shape()[0];
    for (int r = 1; r < job.training_ranks()->size(); ++r) {
      const DataParallelTrainer::RowRange rows = trainer_->RowsOfRank(batch, r);
      RankCommand command;
      command.kind = RankCommand::Kind::kStep;
      command.model = environment_.source.name;
      command.first_row = rows.first;
      command.batch = batch;
      command.configuration = ConfigurationId();
      for (const Tensor& t : inputs) {
        absl::StatusOr<Tensor> part = t.SliceRows(rows.first, rows.end);
        if (!part.ok()) return part.status();
        command.inputs.push_back(*std::move(part));
      }
      absl::StatusOr<Tensor> part = targets.SliceRows(rows.first, rows.end);
      if (!part.ok()) return part.status();
      command.targets = *std::move(part);
      // Once one rank has its rows, the step goes on to the trainer, or the
      // group breaks (a rank that does not take its command).
      if (absl::Status s = job.SendCommandTo(r, EncodeRankCommand(command)); !s.ok()) return s;
    }
    return trainer_->Step(inputs, targets);
  });
}

absl::StatusOr<DataParallelTrainer::StepResult> ModelTraining::ShardStepLocked(
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
  const uint64_t configuration = ConfigurationId();
  return StepLocked(targets.dtype(), [&] {
    *entered = true;
    return trainer_->StepShard(shard.step, configuration, inputs, targets);
  });
}

uint64_t ModelTraining::ConfigurationId() const {
  // What the ranks must agree on: not where each writes checkpoints.
  v1::TrainingConfig config = config_;
  config.clear_checkpoint_dir();
  config.set_checkpoint_every_steps(0);
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream out(&stream);
  out.SetSerializationDeterministic(true);
  config.SerializeToCodedStream(&out);
  out.Trim();
  uint64_t hash = 14695981039346656037ull;  // FNV-1a.
  for (unsigned char c : bytes) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

absl::StatusOr<DataParallelTrainer::StepResult> ModelTraining::StepLocked(
    DType target_dtype, absl::FunctionRef<absl::StatusOr<DataParallelTrainer::StepResult>()> step) {
  // The targets' dtype picks the loss's form (class labels or
  // probabilities), and a client may change it between steps: the trainer
  // is then made again for the new form, from the current weights, the
  // optimizer's state and the step count, as a checkpoint would resume.
  if (trainer_ != nullptr && trainer_target_dtype_ != target_dtype) {
    absl::StatusOr<std::shared_ptr<const Model>> current = trainer_->CurrentModel();
    if (!current.ok()) return current.status();
    absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state = trainer_->OptimizerState();
    if (!state.ok()) return state.status();
    model_ = *std::move(current);
    resume_ = Checkpoint();
    resume_->step = published_step_;
    resume_->optimizer = ToOptimizerConfig(config_.optimizer());
    resume_->optimizer_state = *std::move(state);
    trainer_.reset();
  }
  const bool new_trainer = trainer_ == nullptr;
  const std::optional<Checkpoint> resume = resume_;  // Tensors are shared, not copied.
  if (absl::Status s = EnsureTrainer(target_dtype); !s.ok()) return s;
  absl::StatusOr<DataParallelTrainer::StepResult> result = step();
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
  if (config_.checkpoint_every_steps() > 0 &&
      result->step % config_.checkpoint_every_steps() == 0) {
    // The step is applied whatever happens to its checkpoint, so it is
    // answered OK with the failure beside it: an error would make a client
    // retry, and train the batch twice.
    absl::StatusOr<std::pair<std::string, int64_t>> saved = SaveLocked("");
    if (saved.ok()) {
      result->checkpoint_path = saved->first;
    } else {
      result->checkpoint_status = absl::Status(
          saved.status().code(),
          absl::StrCat("step ", result->step,
                       " was applied, but its checkpoint failed: ", saved.status().message()));
      // The client may not look at checkpoint_status; the operator must
      // learn that no checkpoint is being written.
      LogError(absl::StrCat("model '", environment_.source.name,
                            "': ", result->checkpoint_status.message()));
    }
  }
  return result;
}

void ModelTraining::TrainedServable(ServableDone then) {
  std::optional<std::shared_ptr<Servable>> current;
  {
    absl::MutexLock lock(&predict_mu_);
    if (predict_step_ == trained_step_.load()) current = predict_set_;
  }
  if (current) {
    std::move(then)(*std::move(current));
    return;
  }
  // Built here, on the training thread, after the steps queued before it;
  // Predicts that ask meanwhile queue behind it and find it built.
  worker_.Submit([this, then = std::move(then)]() mutable { std::move(then)(PublishNow()); });
}

absl::StatusOr<std::shared_ptr<Servable>> ModelTraining::PublishNow() {
  std::shared_ptr<const Model> trained;
  int64_t step = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock predict_lock(&predict_mu_);
    if (published_step_ == predict_step_ || model_ == nullptr) return predict_set_;
    // Between configurations model_ holds the latest weights.
    if (trainer_ != nullptr) {
      absl::StatusOr<std::shared_ptr<const Model>> current = trainer_->CurrentModel();
      if (!current.ok()) return current.status();
      trained = *std::move(current);
    } else {
      trained = model_;
    }
    step = published_step_;
  }
  Graph graph = trained->graph();
  if (absl::Status s = OptimizeForInference(&graph); !s.ok()) return s;
  auto model = std::make_shared<const Model>(trained->name(), trained->source(), std::move(graph));
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
      BuildReplicaSet(model, environment_.devices, environment_.options, environment_.observer);
  if (!set.ok()) return set.status();
  absl::MutexLock lock(&predict_mu_);
  // A replaced set lives on while Predicts that started on it finish; its
  // last reference must not be dropped on one of its own slot threads.
  if (environment_.retirer != nullptr) environment_.retirer->Retire(std::move(predict_set_));
  predict_set_ = *std::move(set);
  predict_step_ = step;
  return predict_set_;
}

void ModelTraining::SaveCheckpoint(std::string path, SaveDone done) {
  worker_.Submit([this, path = std::move(path), done = std::move(done)]() mutable {
    absl::StatusOr<std::pair<std::string, int64_t>> saved;
    {
      absl::MutexLock lock(&mu_);
      saved = SaveLocked(path);
    }
    std::move(done)(std::move(saved));
  });
}

absl::StatusOr<std::pair<std::string, int64_t>> ModelTraining::SaveLocked(const std::string& path) {
  // After a restart on a checkpoint nothing has loaded the model yet.
  if (absl::Status s = LoadModel(); !s.ok()) return s;
  absl::StatusOr<CheckpointRoot::Location> target;
  const bool numbered = path.empty();
  if (!numbered) {
    target = environment_.checkpoints.Locate(path, "path");
  } else if (config_.checkpoint_dir().empty()) {
    return absl::InvalidArgumentError(
        "path: empty, and no config.checkpoint_dir is configured to write into");
  } else {
    target = environment_.checkpoints.Locate(
        NumberedCheckpointPath(config_.checkpoint_dir(), environment_.source.name, published_step_),
        "config.checkpoint_dir");
    if (target.ok()) {
      // A numbered name another run wrote (an earlier daemon that reached
      // this step) is that run's checkpoint: kept, never replaced.
      absl::StatusOr<std::string> writer = ReadCheckpointRunId(target->directory, target->name);
      if (!absl::IsNotFound(writer.status()) && (!writer.ok() || *writer != run_id_)) {
        return absl::AlreadyExistsError(
            absl::StrCat("config.checkpoint_dir: '", target->path,
                         "' exists and was not written by this run of training (",
                         writer.ok() ? (writer->empty() ? std::string("it records no run")
                                                        : absl::StrCat("run ", *writer))
                                     : std::string(writer.status().message()),
                         "; this run is ", run_id_,
                         "); it is kept. Train into another checkpoint_dir, or "
                         "move it away"));
      }
    }
  }
  if (!target.ok()) return target.status();
  if (published_step_ == 0 || model_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", environment_.source.name,
                     "' has not taken a training step since it was loaded; nothing to save"));
  }
  Checkpoint checkpoint;
  checkpoint.step = published_step_;
  checkpoint.optimizer = ToOptimizerConfig(config_.optimizer());
  // The weights and running statistics (every float initializer of the
  // current model), and the optimizer's state when a trainer holds one
  // (not between a new configuration and its first step).
  std::shared_ptr<const Model> current = model_;
  if (trainer_ != nullptr) {
    absl::StatusOr<std::shared_ptr<const Model>> copied = trainer_->CurrentModel();
    if (!copied.ok()) return copied.status();  // A failed copy is never written.
    current = *std::move(copied);
  }
  const Graph& graph = current->graph();
  for (const auto& [v, tensor] : graph.initializers) {
    if (tensor.dtype() == DType::kFloat32)
      checkpoint.parameters.emplace(graph.values[v].name, tensor);
  }
  if (trainer_ != nullptr) {
    absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state = trainer_->OptimizerState();
    if (!state.ok()) return state.status();
    checkpoint.optimizer_state = *std::move(state);
  } else if (resume_) {
    // Saved after a restart, before a step: the state it resumes with.
    checkpoint.optimizer = resume_->optimizer;
    checkpoint.optimizer_state = resume_->optimizer_state;
  }
  google::protobuf::TextFormat::PrintToString(config_, &checkpoint.training_config);
  checkpoint.run_id = run_id_;
  if (absl::Status s = WriteCheckpoint(source_bytes_, target->directory, target->name, checkpoint);
      !s.ok()) {
    return s;
  }
  if (numbered) {
    // The new one is whole on disk; only now may older ones go.
    absl::Status pruned = PruneNumberedCheckpoints(target->directory, environment_.source.name,
                                                   environment_.keep_checkpoints, run_id_,
                                                   {target->path, environment_.source.path});
    if (!pruned.ok()) {
      LogWarning(absl::StrCat("model '", environment_.source.name,
                              "': removing old checkpoints: ", pruned.message()));
    }
  }
  return std::make_pair(target->path, checkpoint.step);
}

void ModelTraining::RestoreConfig(const std::string& text) {
  if (text.empty()) return;
  v1::TrainingConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(text, &config)) {
    LogWarning(absl::StrCat("model '", environment_.source.name,
                            "': the checkpoint's training configuration does not parse; training "
                            "starts from the defaults"));
    return;
  }
  if (!config.checkpoint_dir().empty()) {
    // The root may differ from the one it was written under, or be off.
    absl::StatusOr<std::string> dir =
        environment_.checkpoints.Resolve(config.checkpoint_dir(), "config.checkpoint_dir");
    if (!dir.ok()) {
      LogWarning(absl::StrCat(
          "model '", environment_.source.name,
          "': periodic checkpoints stay off after the restart: ", dir.status().message()));
      config.clear_checkpoint_dir();
      config.set_checkpoint_every_steps(0);
    }
  }
  if (environment_.job != nullptr && !environment_.job->leads()) {
    // A job restarted on a checkpoint: only rank 0 writes the next ones.
    config.clear_checkpoint_dir();
    config.set_checkpoint_every_steps(0);
  }
  config_ = std::move(config);
}

}  // namespace replicad
