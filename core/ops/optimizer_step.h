#ifndef REPLICAD_CORE_OPS_OPTIMIZER_STEP_H_
#define REPLICAD_CORE_OPS_OPTIMIZER_STEP_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ops/exact_float.h"
#include "core/ops/host_device.h"

// The update rules of replicad.OptimizerStep (training_ops.h), one element at a
// time, shared by the host Optimizer (core/train/optimizer.h) and the CUDA
// kernel, so CPU and GPU slots compute the same bits. Free of absl: .cu files
// include it. The attributes and the shape rule: optimizer_step_attributes.h.

namespace replicad {

// An update rule with PyTorch's torch.optim semantics (1.13, foreach=False, maximize,
// amsgrad and centered off, SGD dampening 0). Hyperparameters are float32, as the state is.
// core/train/optimizer.h validates it (ValidateOptimizerConfig).
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

// The largest learning_rate and weight_decay ValidateOptimizerHyperparameters accepts.
constexpr float kMaxLearningRate = 1e4f;
constexpr float kMaxWeightDecay = 1e4f;

// "sgd", "adam", "rmsprop" (the names used in the API, the op's `kind` and messages);
// "unknown(<n>)" for a value outside the enumerators. OptimizerKindFromName inverts it.
std::string OptimizerKindName(OptimizerConfig::Kind kind);
std::optional<OptimizerConfig::Kind> OptimizerKindFromName(std::string_view name);

// The state tensors one parameter needs, in the order of the op's outputs after P and of
// the optimizer's checkpoint entries ("param<i>.<name>"): SGD: "momentum_buffer" when
// momentum != 0; Adam: "exp_avg", "exp_avg_sq"; RMSprop: "momentum_buffer" when
// momentum > 0, then "square_avg". PyTorch's state dict keys.
std::vector<std::string> OptimizerStateNames(OptimizerConfig::Kind kind, float momentum);

// Where each state tensor sits in that list (-1 where the kind does not use it), so code
// holding the list (the op's outputs after P, the optimizer's slots) finds each role.
struct OptimizerStateIndex {
  int momentum_buffer = -1;
  int exp_avg = -1;
  int exp_avg_sq = -1;
  int square_avg = -1;
};
OptimizerStateIndex OptimizerStateIndexOf(OptimizerConfig::Kind kind, float momentum);

// What the element loop of one update reads: computed once per update on the host, in
// double from the config's float values as Python computes them (1 - beta, lr /
// bias_correction, ...), then rounded to float32 as PyTorch hands them to its kernels.
struct OptimizerStepScalars {
  OptimizerConfig::Kind kind = OptimizerConfig::Kind::kSgd;
  // Update number t == 1: the state is not read (it is zeros in PyTorch, and SGD's momentum
  // buffer starts as a copy of the direction), so it may hold anything before.
  bool first = true;
  float weight_decay = 0;
  float momentum = 0;  // SGD, RMSprop.
  bool nesterov = false;
  float neg_lr = 0;  // -learning_rate (SGD, RMSprop).
  float beta1 = 0, beta2 = 0, one_minus_beta1 = 0, one_minus_beta2 = 0;  // Adam.
  float neg_step_size = 0;               // Adam: -(lr / (1 - beta1^t)).
  float bias_correction2_sqrt = 0;       // Adam: sqrt(1 - beta2^t).
  float epsilon = 0;                     // Adam, RMSprop.
  float alpha = 0, one_minus_alpha = 0;  // RMSprop.
};

// The scalars of update number t (1-based) under `config` (already valid).
OptimizerStepScalars MakeOptimizerStepScalars(const OptimizerConfig& config, int64_t t);

// The update rules mirror torch/optim/{sgd,adam,rmsprop}.py (_single_tensor_*) and the
// ATen CPU kernels under them, operation by operation, so float32 results stay within a
// few ulps of PyTorch's:
//   t.add_(u, alpha=a)            t + a * u
//   t.addcmul_(u, w, value=c)     t + (c * u) * w
//   t.addcdiv_(u, w, value=c)     t + (c * u) / w
// PyTorch's vectorized kernels may fuse a multiply-add where ours round twice; the
// difference is an ulp, and it does not affect the bitwise agreement between replicas.
// Each operation rounds on its own on both sides (core/ops/exact_float.h), so a GPU slot
// computes what a CPU slot does.
namespace optimizer_math {
using exact_float::Add;
using exact_float::Div;
using exact_float::Mul;
using exact_float::Sqrt;
// The gradient plus L2 weight decay: d = g + weight_decay * p.
REPLICAD_HOST_DEVICE inline float Direction(float p, float g, const OptimizerStepScalars& s) {
  return s.weight_decay != 0.0f ? Add(g, Mul(s.weight_decay, p)) : g;
}

}  // namespace optimizer_math

// SGD: `buf` is the element's momentum buffer; it may be null only when momentum == 0.
REPLICAD_HOST_DEVICE inline void SgdUpdate(float& p, float g, float* buf,
                                           const OptimizerStepScalars& s) {
  using optimizer_math::Add, optimizer_math::Direction, optimizer_math::Div, optimizer_math::Mul,
      optimizer_math::Sqrt;
  float d = Direction(p, g, s);
  if (s.momentum != 0.0f) {
    *buf = s.first ? d : Add(Mul(*buf, s.momentum), d);
    d = s.nesterov ? Add(d, Mul(s.momentum, *buf)) : *buf;
  }
  p = Add(p, Mul(s.neg_lr, d));
}

// Adam (not AdamW): moments m (exp_avg) and v (exp_avg_sq).
REPLICAD_HOST_DEVICE inline void AdamUpdate(float& p, float g, float& m, float& v,
                                            const OptimizerStepScalars& s) {
  using optimizer_math::Add, optimizer_math::Direction, optimizer_math::Div, optimizer_math::Mul,
      optimizer_math::Sqrt;
  const float d = Direction(p, g, s);
  m = Add(Mul(s.first ? 0.0f : m, s.beta1), Mul(s.one_minus_beta1, d));
  v = Add(Mul(s.first ? 0.0f : v, s.beta2), Mul(Mul(s.one_minus_beta2, d), d));
  const float denom = Add(Div(Sqrt(v), s.bias_correction2_sqrt), s.epsilon);
  p = Add(p, Div(Mul(s.neg_step_size, m), denom));
}

// RMSprop (not centered): v is square_avg; `buf` the momentum buffer, which may be null
// only when momentum == 0.
REPLICAD_HOST_DEVICE inline void RmspropUpdate(float& p, float g, float& v, float* buf,
                                               const OptimizerStepScalars& s) {
  using optimizer_math::Add, optimizer_math::Direction, optimizer_math::Div, optimizer_math::Mul,
      optimizer_math::Sqrt;
  const float d = Direction(p, g, s);
  v = Add(Mul(s.first ? 0.0f : v, s.alpha), Mul(Mul(s.one_minus_alpha, d), d));
  const float avg = Add(Sqrt(v), s.epsilon);
  if (s.momentum > 0.0f) {
    *buf = Add(Mul(s.first ? 0.0f : *buf, s.momentum), Div(d, avg));
    p = Add(p, Mul(s.neg_lr, *buf));
  } else {
    p = Add(p, Div(Mul(s.neg_lr, d), avg));
  }
}

// One parameter's update on the host, element by element: the host
// Optimizer's loop and the CPU backend's replicad.OptimizerStep kernel.
// `state` holds the kind's state tensors in OptimizerStateNames' order
// (`index` says which is which); n elements of p and g.
inline void UpdateParameterOnHost(const OptimizerStateIndex& index, const OptimizerStepScalars& s,
                                  float* p, const float* g, float* const* state, int64_t n) {
  auto role = [state](int i) { return i < 0 ? nullptr : state[i]; };
  switch (s.kind) {
    case OptimizerConfig::Kind::kSgd: {
      float* buf = role(index.momentum_buffer);
      for (int64_t j = 0; j < n; ++j) SgdUpdate(p[j], g[j], buf != nullptr ? buf + j : nullptr, s);
      break;
    }
    case OptimizerConfig::Kind::kAdam: {
      float* m = role(index.exp_avg);
      float* v = role(index.exp_avg_sq);
      for (int64_t j = 0; j < n; ++j) AdamUpdate(p[j], g[j], m[j], v[j], s);
      break;
    }
    case OptimizerConfig::Kind::kRmsprop: {
      float* v = role(index.square_avg);
      float* buf = role(index.momentum_buffer);
      for (int64_t j = 0; j < n; ++j) {
        RmspropUpdate(p[j], g[j], v[j], buf != nullptr ? buf + j : nullptr, s);
      }
      break;
    }
  }
}

// The first element whose parameter UpdateParameterOnHost would make not finite, or -1;
// *after gets that value. Nothing is written: the rule runs on copies of the parameter and
// its state, a chunk at a time, through UpdateParameterOnHost itself, so the two compute
// the same bits.
inline int64_t FirstNonFiniteUpdateOnHost(const OptimizerStateIndex& index,
                                          const OptimizerStepScalars& s, const float* p,
                                          const float* g, const float* const* state, int64_t n,
                                          float* after) {
  constexpr int64_t kChunk = 1024;
  constexpr int kMaxState = 4;
  int state_count = 0;
  for (int i : {index.momentum_buffer, index.exp_avg, index.exp_avg_sq, index.square_avg}) {
    if (i + 1 > state_count) state_count = i + 1;
  }
  float p_copy[kChunk];
  float state_copy[kMaxState][kChunk];
  float* state_pointers[kMaxState];
  for (int k = 0; k < kMaxState; ++k) state_pointers[k] = state_copy[k];
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = n - begin < kChunk ? n - begin : kChunk;
    std::copy(p + begin, p + begin + count, p_copy);
    for (int k = 0; k < state_count; ++k) {
      std::copy(state[k] + begin, state[k] + begin + count, state_copy[k]);
    }
    UpdateParameterOnHost(index, s, p_copy, g + begin, state_pointers, count);
    for (int64_t j = 0; j < count; ++j) {
      if (!std::isfinite(p_copy[j])) {
        *after = p_copy[j];
        return begin + j;
      }
    }
  }
  return -1;
}

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_OPTIMIZER_STEP_H_
