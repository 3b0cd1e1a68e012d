#ifndef REPLICAD_CORE_OPS_OPTIMIZER_STEP_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_OPTIMIZER_STEP_ATTRIBUTES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/kernel.h"
#include "core/ops/optimizer_step.h"
#include "core/tensor/attributes.h"

namespace replicad {

// OptimizerConfig's float hyperparameters under their API names, for code that
// reads or writes them all (the op's attributes, checkpoint metadata).
struct OptimizerFloatField {
  const char* name;
  float OptimizerConfig::*member;
};
inline constexpr OptimizerFloatField kOptimizerFloatFields[] = {
    {"learning_rate", &OptimizerConfig::learning_rate},
    {"momentum", &OptimizerConfig::momentum},
    {"weight_decay", &OptimizerConfig::weight_decay},
    {"beta1", &OptimizerConfig::beta1},
    {"beta2", &OptimizerConfig::beta2},
    {"epsilon", &OptimizerConfig::epsilon},
    {"alpha", &OptimizerConfig::alpha},
};

// replicad.OptimizerStep's attributes (training_ops.h) <-> OptimizerConfig.

// InvalidArgument "<prefix><field> must be <range>; received <value>" for the first field
// out of range, whatever the kind (the defaults are all valid; a kind ignores the rest):
// kind one of the enumerators; learning_rate finite > 0; momentum, weight_decay finite
// >= 0; nesterov needs momentum > 0; beta1, beta2, alpha in [0, 1); epsilon finite > 0.
// The optimizer's config uses the prefix "optimizer.", the op "attribute ".
absl::Status ValidateOptimizerHyperparameters(const OptimizerConfig& config,
                                              absl::string_view prefix);

// The node attributes that carry `config`: kind (string), learning_rate, momentum,
// weight_decay, beta1, beta2, epsilon, alpha (floats), nesterov (int 0/1).
Attributes OptimizerStepAttributes(const OptimizerConfig& config);

// The config a replicad.OptimizerStep node's attributes give (absent floats take
// OptimizerConfig's defaults; kind is required). InvalidArgument naming the node, the
// attribute, the expected and the received value.
absl::StatusOr<OptimizerConfig> ParseOptimizerStep(const KernelSpec& spec);

// The op's update number t, for a kernel's Run: `run`'s step (core/device/run_context.h;
// the optimizer sets it). InvalidArgument naming `label` (the node) when it is < 1, as in
// a default RunContext.
absl::StatusOr<int64_t> OptimizerUpdateNumber(const RunContext& run, absl::string_view label);

// What the backends' replicad.OptimizerStep and replicad.OptimizerDryRun
// kernels hold: the node's rule (ParseOptimizerStep), its state roles, the
// parameters it updates (each one's element count, from its G) and its label
// for errors.
class OptimizerRule {
 public:
  // `spec` is either op, already through its shape rule.
  static absl::StatusOr<OptimizerRule> Parse(const KernelSpec& spec);

  // The update's scalars for a Run (OptimizerUpdateNumber's error for a
  // context without an update number).
  absl::StatusOr<OptimizerStepScalars> ScalarsFor(const RunContext& run) const;
  const OptimizerConfig& config() const { return config_; }
  const OptimizerStateIndex& index() const { return index_; }
  // The kind's state tensors per parameter (OptimizerStateNames' size).
  int state_count() const { return state_count_; }
  // The parameters (k) and parameter j's elements.
  size_t parameters() const { return elements_.size(); }
  int64_t elements(size_t j) const { return elements_[j]; }

 private:
  std::string label_;
  OptimizerConfig config_;
  OptimizerStateIndex index_;
  int state_count_ = 0;
  std::vector<int64_t> elements_;
};

// The op's shape rule (training_ops.cc): G_0..G_{k-1} float32 of any shape -> for
// each, P_j and the kind's state tensors (OptimizerStateNames), each of G_j's type.
absl::Status InferOptimizerStep(KernelSpec* spec);
// replicad.OptimizerDryRun's: per parameter G_j, P_j and the kind's state
// tensors, all float32 of G_j's shape -> one float32 [] flag per parameter.
absl::Status InferOptimizerDryRun(KernelSpec* spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_OPTIMIZER_STEP_ATTRIBUTES_H_
