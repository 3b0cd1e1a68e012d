#include "server/training_config_proto.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/narrow_float.h"
#include "core/base/status_macros.h"
#include "core/model/compute_precision.h"

namespace replicad {
namespace {

// InvalidArgument naming `field` when `value` is not one of the enum's values.
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

// The double a client would have written for `value`: its shortest decimal.
double AsWritten(float value) { return std::strtod(ShortestDecimal(value).c_str(), nullptr); }

void SetIfPresent(bool present, double value, float* out) {
  if (present) *out = NarrowToFloat(value);
}

OptimizerConfig OptimizerFromProto(const v1::OptimizerConfig& o) {
  OptimizerConfig c;  // PyTorch's defaults, as the API documents.
  c.kind = o.kind() == v1::OPTIMIZER_ADAM      ? OptimizerConfig::Kind::kAdam
           : o.kind() == v1::OPTIMIZER_RMSPROP ? OptimizerConfig::Kind::kRmsprop
                                               : OptimizerConfig::Kind::kSgd;
  SetIfPresent(o.has_learning_rate(), o.learning_rate(), &c.learning_rate);
  SetIfPresent(o.has_momentum(), o.momentum(), &c.momentum);
  c.nesterov = o.nesterov();
  SetIfPresent(o.has_weight_decay(), o.weight_decay(), &c.weight_decay);
  SetIfPresent(o.has_beta1(), o.beta1(), &c.beta1);
  SetIfPresent(o.has_beta2(), o.beta2(), &c.beta2);
  SetIfPresent(o.has_epsilon(), o.epsilon(), &c.epsilon);
  SetIfPresent(o.has_alpha(), o.alpha(), &c.alpha);
  return c;
}

}  // namespace

absl::StatusOr<TrainingConfig> TrainingConfigFromProto(const v1::TrainingConfig& proto) {
  REPLICAD_RETURN_IF_ERROR(CheckEnum(v1::Loss_descriptor(), proto.loss(), "config.loss"));
  REPLICAD_RETURN_IF_ERROR(
      CheckEnum(v1::OptimizerKind_descriptor(), proto.optimizer().kind(), "config.optimizer.kind"));
  REPLICAD_RETURN_IF_ERROR(
      CheckEnum(v1::GradientReduction_descriptor(), proto.reduction(), "config.reduction"));
  REPLICAD_RETURN_IF_ERROR(CheckEnum(v1::NonFiniteSteps_descriptor(), proto.non_finite_steps(),
                                     "config.non_finite_steps"));
  TrainingConfig config;
  if (proto.loss() == v1::LOSS_MEAN_SQUARED_ERROR) {
    config.loss = TrainingConfig::Loss::kMeanSquaredError;
  }
  config.output = proto.output();
  config.optimizer = OptimizerFromProto(proto.optimizer());
  if (proto.reduction() == v1::GRADIENT_REDUCTION_PS) {
    config.reduction = TrainingConfig::Reduction::kParameterServer;
  }
  config.ps_device = proto.ps_device();
  if (proto.has_sync_batch_norm()) config.sync_batch_norm = proto.sync_batch_norm();
  config.seed = proto.seed();
  if (proto.non_finite_steps() == v1::NON_FINITE_STEPS_SKIP) {
    config.non_finite_steps = TrainerOptions::NonFiniteSteps::kSkip;
  }
  config.checkpoint_every_steps = proto.checkpoint_every_steps();
  config.checkpoint_dir = proto.checkpoint_dir();
  if (!proto.precision().empty()) {
    REPLICAD_ASSIGN_OR_RETURN(config.precision,
                              ParseComputePrecision(proto.precision(), "config.precision"));
  }
  SetIfPresent(proto.has_initial_loss_scale(), proto.initial_loss_scale(),
               &config.loss_scaling.initial_scale);
  if (proto.has_loss_scale_growth_interval()) {
    config.loss_scaling.growth_interval = proto.loss_scale_growth_interval();
  }
  return config;
}

v1::TrainingConfig TrainingConfigToProto(const TrainingConfig& config) {
  v1::TrainingConfig proto;
  proto.set_loss(config.loss == TrainingConfig::Loss::kMeanSquaredError
                     ? v1::LOSS_MEAN_SQUARED_ERROR
                     : v1::LOSS_SOFTMAX_CROSS_ENTROPY);
  proto.set_output(config.output);
  const OptimizerConfig& c = config.optimizer;
  v1::OptimizerConfig* o = proto.mutable_optimizer();
  o->set_kind(c.kind == OptimizerConfig::Kind::kAdam      ? v1::OPTIMIZER_ADAM
              : c.kind == OptimizerConfig::Kind::kRmsprop ? v1::OPTIMIZER_RMSPROP
                                                          : v1::OPTIMIZER_SGD);
  o->set_learning_rate(AsWritten(c.learning_rate));
  o->set_momentum(AsWritten(c.momentum));
  o->set_nesterov(c.nesterov);
  o->set_weight_decay(AsWritten(c.weight_decay));
  o->set_beta1(AsWritten(c.beta1));
  o->set_beta2(AsWritten(c.beta2));
  o->set_epsilon(AsWritten(c.epsilon));
  o->set_alpha(AsWritten(c.alpha));
  proto.set_reduction(config.reduction == TrainingConfig::Reduction::kParameterServer
                          ? v1::GRADIENT_REDUCTION_PS
                          : v1::GRADIENT_REDUCTION_ALLREDUCE);
  proto.set_ps_device(config.ps_device);
  proto.set_sync_batch_norm(config.sync_batch_norm);
  proto.set_seed(config.seed);
  proto.set_checkpoint_every_steps(config.checkpoint_every_steps);
  proto.set_checkpoint_dir(config.checkpoint_dir);
  proto.set_non_finite_steps(config.non_finite_steps == TrainerOptions::NonFiniteSteps::kSkip
                                 ? v1::NON_FINITE_STEPS_SKIP
                                 : v1::NON_FINITE_STEPS_REFUSE);
  proto.set_precision(std::string(ComputePrecisionName(config.precision)));
  proto.set_initial_loss_scale(AsWritten(config.loss_scaling.initial_scale));
  proto.set_loss_scale_growth_interval(config.loss_scaling.growth_interval);
  return proto;
}

}  // namespace replicad
