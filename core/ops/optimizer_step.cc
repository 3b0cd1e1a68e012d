// The host side of replicad.OptimizerStep: names, scalars, attributes (see
// optimizer_step.h and optimizer_step_attributes.h).

#include "core/ops/optimizer_step.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/optimizer_step_attributes.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

constexpr OptimizerConfig::Kind kKinds[] = {
    OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdam, OptimizerConfig::Kind::kRmsprop};

struct StateTensor {
  const char* name;
  int OptimizerStateIndex::*role;
};

// The one place that knows which state each kind keeps, and in which order (PyTorch's).
std::vector<StateTensor> StateLayout(OptimizerConfig::Kind kind, float momentum) {
  const StateTensor momentum_buffer = {"momentum_buffer", &OptimizerStateIndex::momentum_buffer};
  const StateTensor exp_avg = {"exp_avg", &OptimizerStateIndex::exp_avg};
  const StateTensor exp_avg_sq = {"exp_avg_sq", &OptimizerStateIndex::exp_avg_sq};
  const StateTensor square_avg = {"square_avg", &OptimizerStateIndex::square_avg};
  switch (kind) {
    case OptimizerConfig::Kind::kSgd:
      if (momentum != 0.0f) return {momentum_buffer};
      return {};
    case OptimizerConfig::Kind::kAdam:
      return {exp_avg, exp_avg_sq};
    case OptimizerConfig::Kind::kRmsprop:
      if (momentum > 0.0f) return {momentum_buffer, square_avg};
      return {square_avg};
  }
  return {};
}

bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }  // false for NaN.

absl::Status OutOfRange(absl::string_view prefix, const char* field, const char* range,
                        float received) {
  return absl::InvalidArgumentError(
      absl::StrCat(prefix, field, " must be ", range, "; received ", received));
}

}  // namespace

std::string OptimizerKindName(OptimizerConfig::Kind kind) {
  switch (kind) {
    case OptimizerConfig::Kind::kSgd:
      return "sgd";
    case OptimizerConfig::Kind::kAdam:
      return "adam";
    case OptimizerConfig::Kind::kRmsprop:
      return "rmsprop";
  }
  return absl::StrCat("unknown(", static_cast<int>(kind), ")");
}

std::optional<OptimizerConfig::Kind> OptimizerKindFromName(std::string_view name) {
  for (OptimizerConfig::Kind kind : kKinds) {
    if (OptimizerKindName(kind) == name) return kind;
  }
  return std::nullopt;
}

std::vector<std::string> OptimizerStateNames(OptimizerConfig::Kind kind, float momentum) {
  std::vector<std::string> names;
  for (const StateTensor& tensor : StateLayout(kind, momentum)) names.push_back(tensor.name);
  return names;
}

OptimizerStateIndex OptimizerStateIndexOf(OptimizerConfig::Kind kind, float momentum) {
  OptimizerStateIndex index;
  const std::vector<StateTensor> layout = StateLayout(kind, momentum);
  for (size_t i = 0; i < layout.size(); ++i) index.*layout[i].role = static_cast<int>(i);
  return index;
}

OptimizerStepScalars MakeOptimizerStepScalars(const OptimizerConfig& config, int64_t t) {
  OptimizerStepScalars s;
  s.kind = config.kind;
  s.first = t <= 1;
  s.weight_decay = config.weight_decay;
  s.momentum = config.momentum;
  s.nesterov = config.nesterov;
  s.neg_lr = -config.learning_rate;
  s.epsilon = config.epsilon;
  // Python's arithmetic on the config's float values: double, rounded once at the end.
  const double beta1 = config.beta1;
  const double beta2 = config.beta2;
  const double step = static_cast<double>(t);
  const double bias_correction1 = 1.0 - std::pow(beta1, step);
  const double bias_correction2 = 1.0 - std::pow(beta2, step);
  s.beta1 = config.beta1;
  s.beta2 = config.beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.neg_step_size = static_cast<float>(-(config.learning_rate / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.alpha = config.alpha;
  s.one_minus_alpha = static_cast<float>(1.0 - static_cast<double>(config.alpha));
  return s;
}

absl::Status ValidateOptimizerHyperparameters(const OptimizerConfig& config,
                                              absl::string_view prefix) {
  switch (config.kind) {
    case OptimizerConfig::Kind::kSgd:
    case OptimizerConfig::Kind::kAdam:
    case OptimizerConfig::Kind::kRmsprop:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "kind must be sgd, adam or rmsprop; received ", static_cast<int>(config.kind)));
  }
  // No training uses a learning rate or a weight decay anywhere near these
  // bounds, and far above them the first update of ordinary gradients
  // overflows float32 (1e38 * a gradient of 4 is infinite).
  if (!(config.learning_rate > 0.0f) || !(config.learning_rate <= kMaxLearningRate)) {
    return OutOfRange(prefix, "learning_rate", "> 0 and <= 10000", config.learning_rate);
  }
  if (!(config.momentum >= 0.0f) || !std::isfinite(config.momentum)) {
    return OutOfRange(prefix, "momentum", "finite and >= 0", config.momentum);
  }
  if (!(config.weight_decay >= 0.0f) || !(config.weight_decay <= kMaxWeightDecay)) {
    return OutOfRange(prefix, "weight_decay", ">= 0 and <= 10000", config.weight_decay);
  }
  if (config.nesterov && config.momentum == 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "nesterov requires ", prefix, "momentum > 0; received momentum 0"));
  }
  if (!InUnitInterval(config.beta1)) return OutOfRange(prefix, "beta1", "in [0, 1)", config.beta1);
  if (!InUnitInterval(config.beta2)) return OutOfRange(prefix, "beta2", "in [0, 1)", config.beta2);
  if (!(config.epsilon > 0.0f) || !std::isfinite(config.epsilon)) {
    return OutOfRange(prefix, "epsilon", "finite and > 0", config.epsilon);
  }
  if (!InUnitInterval(config.alpha)) return OutOfRange(prefix, "alpha", "in [0, 1)", config.alpha);
  return absl::OkStatus();
}

Attributes OptimizerStepAttributes(const OptimizerConfig& config) {
  Attributes attributes;
  attributes.Set("kind", OptimizerKindName(config.kind));
  for (const OptimizerFloatField& field : kOptimizerFloatFields) {
    attributes.Set(field.name, config.*field.member);
  }
  attributes.Set("nesterov", int64_t{config.nesterov ? 1 : 0});
  return attributes;
}

absl::StatusOr<OptimizerConfig> ParseOptimizerStep(const KernelSpec& spec) {
  OptimizerConfig config;
  if (!spec.attributes->Has("kind")) {
    return NodeError(spec, "attribute kind (sgd, adam or rmsprop) is required");
  }
  REPLICAD_ASSIGN_OR_RETURN(const std::string kind, StringAttribute(spec, "kind", ""));
  std::optional<OptimizerConfig::Kind> parsed = OptimizerKindFromName(kind);
  if (!parsed) {
    return NodeError(
        spec, absl::StrCat("attribute kind must be sgd, adam or rmsprop; received '", kind, "'"));
  }
  config.kind = *parsed;
  for (const OptimizerFloatField& field : kOptimizerFloatFields) {
    REPLICAD_ASSIGN_OR_RETURN(config.*field.member,
                              FloatAttribute(spec, field.name, config.*field.member));
  }
  REPLICAD_ASSIGN_OR_RETURN(const int64_t nesterov, IntAttribute(spec, "nesterov", 0));
  if (nesterov != 0 && nesterov != 1) {
    return NodeError(spec, absl::StrCat("attribute nesterov must be 0 or 1; received ", nesterov));
  }
  config.nesterov = nesterov == 1;
  if (absl::Status status = ValidateOptimizerHyperparameters(config, "attribute "); !status.ok()) {
    return NodeError(spec, status.message());
  }
  return config;
}

absl::StatusOr<OptimizerRule> OptimizerRule::Parse(const KernelSpec& spec) {
  OptimizerRule rule;
  REPLICAD_ASSIGN_OR_RETURN(rule.config_, ParseOptimizerStep(spec));
  rule.label_ = NodeLabel(spec);
  rule.index_ = OptimizerStateIndexOf(rule.config_.kind, rule.config_.momentum);
  rule.state_count_ =
      static_cast<int>(OptimizerStateNames(rule.config_.kind, rule.config_.momentum).size());
  // The step takes each parameter's G alone; the dry run G, P and the state.
  const size_t per_parameter = spec.op_type == kOptimizerDryRun ? 2 + rule.state_count_ : 1;
  for (size_t first = 0; first < spec.inputs.size(); first += per_parameter) {
    rule.elements_.push_back(NumElements(spec.inputs[first]->shape));
  }
  return rule;
}

absl::StatusOr<OptimizerStepScalars> OptimizerRule::ScalarsFor(const RunContext& run) const {
  REPLICAD_ASSIGN_OR_RETURN(const int64_t t, OptimizerUpdateNumber(run, label_));
  return MakeOptimizerStepScalars(config_, t);
}

absl::StatusOr<int64_t> OptimizerUpdateNumber(const RunContext& run, absl::string_view label) {
  const int64_t t = run.step;
  if (t < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": the update number (the run context's step) must be >= 1; received ", t));
  }
  return t;
}

}  // namespace replicad
