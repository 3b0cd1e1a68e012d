#ifndef REPLICAD_CORE_TRAIN_OPTIMIZER_H_
#define REPLICAD_CORE_TRAIN_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"

namespace replicad {

// An update rule with PyTorch's torch.optim semantics (1.13, foreach=False, maximize,
// amsgrad and centered off, SGD dampening 0). Hyperparameters are float32, as the state is.
struct OptimizerConfig {
  enum class Kind { kSgd, kAdam, kRmsprop };
  Kind kind = Kind::kSgd;
  float learning_rate = 0.01f;
  float momentum = 0.0f;               // SGD, RMSprop.
  bool nesterov = false;               // SGD; needs momentum > 0, as PyTorch requires.
  float weight_decay = 0.0f;           // All: L2 added to the gradient (torch.optim, not AdamW).
  float beta1 = 0.9f, beta2 = 0.999f;  // Adam.
  float epsilon = 1e-8f;               // Adam, RMSprop (PyTorch's default for both).
  float alpha = 0.99f;                 // RMSprop smoothing.
};

// InvalidArgument naming the field, the accepted range and the received value, e.g.
// "optimizer.learning_rate must be finite and > 0; received -1". Every field is
// range-checked whatever the kind (the defaults are all valid); a kind ignores the rest:
// learning_rate finite > 0; momentum, weight_decay finite >= 0; nesterov needs momentum > 0;
// beta1, beta2, alpha in [0, 1); epsilon finite > 0; kind one of the enumerators.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

// "sgd", "adam", "rmsprop" (the names used in the API and in messages).
std::string OptimizerKindName(OptimizerConfig::Kind kind);

// The update rule plus its per-parameter state (momentum buffers, Adam moments, RMSprop
// square averages), in host memory. One instance per replica in allreduce mode: every
// replica applies the same update to its own copy of the weights, and the arithmetic is
// deterministic, so replicas stay bitwise identical given identical gradients.
// Not thread-safe: one thread at a time per instance.
class Optimizer {
 public:
  // `parameter_sizes[i]` is the element count of parameter i (>= 0). Fails with
  // ValidateOptimizerConfig's errors, or InvalidArgument for a negative size.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config,
                                                           std::vector<int64_t> parameter_sizes);

  // One step over every parameter: parameters[i] (parameter_sizes[i] float32s) is updated
  // in place from gradients[i] (the already-reduced mean gradient); then step() grows by 1.
  // The caller keeps ownership; a gradient must not alias its parameter. Aborts on a count
  // mismatch or a null pointer (programmer errors).
  void Step(const std::vector<float*>& parameters, const std::vector<const float*>& gradients);

  // Steps taken (or restored). Adam's bias corrections use it.
  int64_t step() const { return step_; }
  const OptimizerConfig& config() const { return config_; }
  const std::vector<int64_t>& parameter_sizes() const { return sizes_; }

  // A copy of the state as named float32 tensors of shape [parameter_sizes[i]], for
  // checkpoints: "param<i>.momentum_buffer" (SGD and RMSprop with momentum),
  // "param<i>.exp_avg" and "param<i>.exp_avg_sq" (Adam), "param<i>.square_avg" (RMSprop),
  // ordered by parameter then by that list. Only what the kind uses, and nothing before the
  // first step (PyTorch allocates its state lazily too).
  std::vector<std::pair<std::string, Tensor>> State() const;

  // Replaces step() and the state with a checkpoint's: `state` must hold exactly the names
  // State() gives at `step` (none when step is 0), in any order, each float32 with
  // parameter_sizes[i] elements. InvalidArgument naming the entry (missing, unexpected,
  // duplicate, wrong dtype or size) or the step (negative); the optimizer is unchanged then.
  absl::Status Restore(int64_t step, const std::vector<std::pair<std::string, Tensor>>& state);

 private:
  // Per-parameter buffers; empty until the first step.
  struct Slots {
    std::vector<float> momentum_buffer;
    std::vector<float> exp_avg;
    std::vector<float> exp_avg_sq;
    std::vector<float> square_avg;
  };

  Optimizer(const OptimizerConfig& config, std::vector<int64_t> sizes);

  // The state names of one parameter (without the "param<i>." prefix) for this kind.
  std::vector<std::string> SlotNames() const;
  static std::vector<float> Slots::*SlotMember(const std::string& name);

  void SgdStep(int64_t n, float* p, const float* g, Slots& s) const;
  void AdamStep(int64_t n, float* p, const float* g, Slots& s) const;
  void RmspropStep(int64_t n, float* p, const float* g, Slots& s) const;

  OptimizerConfig config_;
  std::vector<int64_t> sizes_;
  std::vector<Slots> slots_;
  int64_t step_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_OPTIMIZER_H_
