#include "core/train/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"

// The update loops mirror torch/optim/{sgd,adam,rmsprop}.py (_single_tensor_*) and the
// ATen CPU kernels under them, operation by operation, so float32 results stay within a
// few ulps of PyTorch's:
//   t.add_(u, alpha=a)            t + a * u
//   t.addcmul_(u, w, value=c)     t + (c * u) * w
//   t.addcdiv_(u, w, value=c)     t + (c * u) / w
// Python scalars reach those kernels as float32, and Python computes the scalars themselves
// (1 - beta, lr / bias_correction, ...) in double: so do we, from the config's float values.
// PyTorch's vectorized kernels may fuse a multiply-add where ours round twice; the
// difference is an ulp, and it does not affect the bitwise agreement between replicas,
// which all run this same code.

namespace replicad {
namespace {

[[noreturn]] void ProgrammerError(const std::string& message) {
  std::fprintf(stderr, "replicad optimizer: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

absl::Status OutOfRange(const char* field, const char* range, float received) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, " must be ", range, "; received ", received));
}

bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }  // false for NaN.

constexpr char kMomentumBuffer[] = "momentum_buffer";
constexpr char kExpAvg[] = "exp_avg";
constexpr char kExpAvgSq[] = "exp_avg_sq";
constexpr char kSquareAvg[] = "square_avg";

std::string EntryName(size_t param, const std::string& slot) {
  return absl::StrCat("param", param, ".", slot);
}

}  // namespace

absl::Status ValidateOptimizerConfig(const OptimizerConfig& config) {
  switch (config.kind) {
    case OptimizerConfig::Kind::kSgd:
    case OptimizerConfig::Kind::kAdam:
    case OptimizerConfig::Kind::kRmsprop:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.kind must be sgd, adam or rmsprop; received ", static_cast<int>(config.kind)));
  }
  if (!(config.learning_rate > 0.0f) || !std::isfinite(config.learning_rate)) {
    return OutOfRange("learning_rate", "finite and > 0", config.learning_rate);
  }
  if (!(config.momentum >= 0.0f) || !std::isfinite(config.momentum)) {
    return OutOfRange("momentum", "finite and >= 0", config.momentum);
  }
  if (!(config.weight_decay >= 0.0f) || !std::isfinite(config.weight_decay)) {
    return OutOfRange("weight_decay", "finite and >= 0", config.weight_decay);
  }
  if (config.nesterov && config.momentum == 0.0f) {
    return absl::InvalidArgumentError(
        "optimizer.nesterov requires optimizer.momentum > 0; received momentum 0");
  }
  if (!InUnitInterval(config.beta1)) return OutOfRange("beta1", "in [0, 1)", config.beta1);
  if (!InUnitInterval(config.beta2)) return OutOfRange("beta2", "in [0, 1)", config.beta2);
  if (!(config.epsilon > 0.0f) || !std::isfinite(config.epsilon)) {
    return OutOfRange("epsilon", "finite and > 0", config.epsilon);
  }
  if (!InUnitInterval(config.alpha)) return OutOfRange("alpha", "in [0, 1)", config.alpha);
  return absl::OkStatus();
}

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

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config,
                                                             std::vector<int64_t> parameter_sizes) {
  if (absl::Status status = ValidateOptimizerConfig(config); !status.ok()) return status;
  for (size_t i = 0; i < parameter_sizes.size(); ++i) {
    if (parameter_sizes[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter_sizes[", i, "] must be >= 0; received ", parameter_sizes[i]));
    }
  }
  return std::unique_ptr<Optimizer>(new Optimizer(config, std::move(parameter_sizes)));
}

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<int64_t> sizes)
    : config_(config), sizes_(std::move(sizes)), slots_(sizes_.size()) {}

std::vector<std::string> Optimizer::SlotNames() const {
  switch (config_.kind) {
    case OptimizerConfig::Kind::kSgd:
      if (config_.momentum != 0.0f) return {kMomentumBuffer};
      return {};
    case OptimizerConfig::Kind::kAdam:
      return {kExpAvg, kExpAvgSq};
    case OptimizerConfig::Kind::kRmsprop:
      if (config_.momentum > 0.0f) return {kMomentumBuffer, kSquareAvg};
      return {kSquareAvg};
  }
  return {};
}

std::vector<float> Optimizer::Slots::*Optimizer::SlotMember(const std::string& name) {
  if (name == kMomentumBuffer) return &Slots::momentum_buffer;
  if (name == kExpAvg) return &Slots::exp_avg;
  if (name == kExpAvgSq) return &Slots::exp_avg_sq;
  if (name == kSquareAvg) return &Slots::square_avg;
  ProgrammerError("unknown state slot " + name);
}

void Optimizer::Step(const std::vector<float*>& parameters,
                     const std::vector<const float*>& gradients) {
  if (parameters.size() != sizes_.size() || gradients.size() != sizes_.size()) {
    ProgrammerError(absl::StrCat("Step got ", parameters.size(), " parameters and ",
                                 gradients.size(), " gradients for ", sizes_.size(),
                                 " parameter sizes"));
  }
  // PyTorch allocates state on the first step; SGD's momentum buffer then starts as a copy
  // of the gradient rather than zeros, which SgdStep handles through step_ == 0.
  if (step_ == 0) {
    const std::vector<std::string> names = SlotNames();
    for (size_t i = 0; i < sizes_.size(); ++i) {
      for (const std::string& name : names) {
        (slots_[i].*SlotMember(name)).assign(static_cast<size_t>(sizes_[i]), 0.0f);
      }
    }
  }
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] == 0) continue;
    if (parameters[i] == nullptr || gradients[i] == nullptr) {
      ProgrammerError(absl::StrCat("Step got a null pointer for parameter ", i));
    }
    switch (config_.kind) {
      case OptimizerConfig::Kind::kSgd:
        SgdStep(sizes_[i], parameters[i], gradients[i], slots_[i]);
        break;
      case OptimizerConfig::Kind::kAdam:
        AdamStep(sizes_[i], parameters[i], gradients[i], slots_[i]);
        break;
      case OptimizerConfig::Kind::kRmsprop:
        RmspropStep(sizes_[i], parameters[i], gradients[i], slots_[i]);
        break;
    }
  }
  ++step_;
}

void Optimizer::SgdStep(int64_t n, float* p, const float* g, Slots& s) const {
  const float weight_decay = config_.weight_decay;
  const float momentum = config_.momentum;
  const bool nesterov = config_.nesterov;
  const bool first = step_ == 0;
  const float neg_lr = -config_.learning_rate;
  float* buf = s.momentum_buffer.data();
  for (int64_t j = 0; j < n; ++j) {
    float d = g[j];
    if (weight_decay != 0.0f) d = d + weight_decay * p[j];
    if (momentum != 0.0f) {
      buf[j] = first ? d : buf[j] * momentum + d;
      d = nesterov ? d + momentum * buf[j] : buf[j];
    }
    p[j] = p[j] + neg_lr * d;
  }
}

void Optimizer::AdamStep(int64_t n, float* p, const float* g, Slots& s) const {
  const float weight_decay = config_.weight_decay;
  const double beta1 = config_.beta1;
  const double beta2 = config_.beta2;
  const double t = static_cast<double>(step_ + 1);
  const double bias_correction1 = 1.0 - std::pow(beta1, t);
  const double bias_correction2 = 1.0 - std::pow(beta2, t);
  const float neg_step_size = static_cast<float>(-(config_.learning_rate / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float b1 = config_.beta1;
  const float b2 = config_.beta2;
  const float one_minus_b1 = static_cast<float>(1.0 - beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - beta2);
  const float eps = config_.epsilon;
  float* m = s.exp_avg.data();
  float* v = s.exp_avg_sq.data();
  for (int64_t j = 0; j < n; ++j) {
    float d = g[j];
    if (weight_decay != 0.0f) d = d + weight_decay * p[j];
    m[j] = m[j] * b1 + one_minus_b1 * d;
    v[j] = v[j] * b2 + (one_minus_b2 * d) * d;
    const float denom = std::sqrt(v[j]) / bias_correction2_sqrt + eps;
    p[j] = p[j] + (neg_step_size * m[j]) / denom;
  }
}

void Optimizer::RmspropStep(int64_t n, float* p, const float* g, Slots& s) const {
  const float weight_decay = config_.weight_decay;
  const float alpha = config_.alpha;
  const float one_minus_alpha = static_cast<float>(1.0 - static_cast<double>(config_.alpha));
  const float eps = config_.epsilon;
  const float momentum = config_.momentum;
  const float neg_lr = -config_.learning_rate;
  float* v = s.square_avg.data();
  float* buf = s.momentum_buffer.data();
  for (int64_t j = 0; j < n; ++j) {
    float d = g[j];
    if (weight_decay != 0.0f) d = d + weight_decay * p[j];
    v[j] = v[j] * alpha + (one_minus_alpha * d) * d;
    const float avg = std::sqrt(v[j]) + eps;
    if (momentum > 0.0f) {
      buf[j] = buf[j] * momentum + d / avg;
      p[j] = p[j] + neg_lr * buf[j];
    } else {
      p[j] = p[j] + (neg_lr * d) / avg;
    }
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::State() const {
  std::vector<std::pair<std::string, Tensor>> state;
  if (step_ == 0) return state;
  const std::vector<std::string> names = SlotNames();
  for (size_t i = 0; i < sizes_.size(); ++i) {
    for (const std::string& name : names) {
      const std::vector<float>& slot = slots_[i].*SlotMember(name);
      Tensor tensor = Tensor::Host(DType::kFloat32, {sizes_[i]});
      if (!slot.empty()) std::memcpy(tensor.raw_data(), slot.data(), tensor.byte_size());
      state.emplace_back(EntryName(i, name), std::move(tensor));
    }
  }
  return state;
}

absl::Status Optimizer::Restore(int64_t step,
                                const std::vector<std::pair<std::string, Tensor>>& state) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state step must be >= 0; received ", step));
  }
  // Entry name -> (parameter, slot) for every entry State() would give at `step`.
  std::map<std::string, std::pair<size_t, std::string>> expected;
  if (step > 0) {
    for (size_t i = 0; i < sizes_.size(); ++i) {
      for (const std::string& name : SlotNames()) expected[EntryName(i, name)] = {i, name};
    }
  }
  const std::string kind = OptimizerKindName(config_.kind);
  std::set<std::string> seen;
  for (const auto& [name, tensor] : state) {
    auto it = expected.find(name);
    if (it == expected.end()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state entry ", name,
                                                     " is not used by ", kind, " with ",
                                                     sizes_.size(), " parameters at step ", step));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state entry ", name, " appears twice"));
    }
    const int64_t size = sizes_[it->second.first];
    if (tensor.buffer() == nullptr || !(tensor.location() == MemoryLocation{}) ||
        tensor.dtype() != DType::kFloat32 || tensor.num_elements() != size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state entry ", name, " must be a host float32 tensor of ", size,
          " elements; received ",
          tensor.buffer() == nullptr ? std::string("an empty tensor")
                                     : absl::StrCat(TensorTypeToString(tensor.type()), " in ",
                                                    MemoryLocationToString(tensor.location()))));
    }
  }
  for (const auto& [name, unused] : expected) {
    if (seen.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state entry ", name, " is missing (", kind, " at step ", step, ")"));
    }
  }
  for (Slots& slots : slots_) slots = Slots{};
  for (const auto& [name, tensor] : state) {
    const auto& [param, slot_name] = expected.at(name);
    const float* data = tensor.data<float>();
    (slots_[param].*SlotMember(slot_name)).assign(data, data + sizes_[param]);
  }
  step_ = step;
  return absl::OkStatus();
}

}  // namespace replicad
