#include "core/train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace replicad {

void LossScaler::Update(bool finite) {
  if (!finite) {
    ++overflowed_steps_;
    finite_in_a_row_ = 0;
    scale_ = std::max(scale_ * 0.5f, std::numeric_limits<float>::min());
    return;
  }
  if (++finite_in_a_row_ < growth_interval_) return;
  finite_in_a_row_ = 0;
  // GradScaler keeps the scale it has where doubling would overflow.
  if (std::isfinite(scale_ * 2.0f)) scale_ *= 2.0f;
}

std::vector<std::pair<std::string, Tensor>> LossScaler::State() const {
  Tensor scale = Tensor::Host(DType::kFloat32, {1});
  scale.data<float>()[0] = scale_;
  Tensor finite_steps = Tensor::Host(DType::kInt64, {1});
  finite_steps.data<int64_t>()[0] = finite_in_a_row_;
  return {{kScaleState, std::move(scale)}, {kFiniteStepsState, std::move(finite_steps)}};
}

void LossScaler::AppendState(std::vector<std::pair<std::string, Tensor>>* state) const {
  for (auto& entry : State()) state->push_back(std::move(entry));
}

std::vector<std::pair<std::string, Tensor>> WithoutLossScale(
    const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<std::pair<std::string, Tensor>> rest;
  for (const auto& entry : state) {
    if (entry.first != LossScaler::kScaleState && entry.first != LossScaler::kFiniteStepsState) {
      rest.push_back(entry);
    }
  }
  return rest;
}

namespace {

// The entry named `name` of `state`, or null.
const Tensor* FindEntry(const std::vector<std::pair<std::string, Tensor>>& state,
                        const char* name) {
  for (const auto& [entry, tensor] : state) {
    if (entry == name) return &tensor;
  }
  return nullptr;
}

absl::Status CheckEntry(const Tensor* tensor, const char* name, DType dtype) {
  if (tensor == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state '", name, "' is missing"));
  }
  if (tensor->dtype() != dtype || tensor->shape() != Shape{1} ||
      tensor->location().kind != MemoryKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer state '", name, "': expected a host ", DTypeName(dtype), " [1], received ",
        DTypeName(tensor->dtype()), " ", ShapeToString(tensor->shape())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LossScaler::Restore(const std::vector<std::pair<std::string, Tensor>>& state) {
  const Tensor* scale = FindEntry(state, kScaleState);
  const Tensor* finite_steps = FindEntry(state, kFiniteStepsState);
  if (scale == nullptr && finite_steps == nullptr) return absl::OkStatus();
  if (absl::Status s = CheckEntry(scale, kScaleState, DType::kFloat32); !s.ok()) return s;
  if (absl::Status s = CheckEntry(finite_steps, kFiniteStepsState, DType::kInt64); !s.ok()) {
    return s;
  }
  const float value = scale->data<float>()[0];
  const int64_t count = finite_steps->data<int64_t>()[0];
  if (!std::isfinite(value) || value <= 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer state '", kScaleState, "': expected a finite number > 0, received ", value));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state '", kFiniteStepsState,
                                                   "': expected a count >= 0, received ", count));
  }
  scale_ = value;
  // A checkpoint from a run with a longer growth interval: the next finite
  // step doubles the scale, as it would have there at the latest.
  finite_in_a_row_ = std::min(count, growth_interval_ - 1);
  return absl::OkStatus();
}

}  // namespace replicad
