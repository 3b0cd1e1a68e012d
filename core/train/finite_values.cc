#include "core/train/finite_values.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace replicad {
namespace {

bool Checkable(const Tensor& tensor) {
  return tensor.dtype() == DType::kFloat32 && tensor.location().kind == MemoryKind::kHost;
}

}  // namespace

absl::Status CheckFiniteValues(const Tensor& tensor, const std::string& field) {
  if (!Checkable(tensor)) return absl::OkStatus();
  const float* values = tensor.data<float>();
  const int64_t count = NumElements(tensor.shape());
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": element ", i, " is ", values[i],
          "; training takes finite values only (a NaN or an infinity would make every weight "
          "it reaches NaN)"));
    }
  }
  return absl::OkStatus();
}

bool AllFinite(const float* values, int64_t count) {
  return std::all_of(values, values + count, [](float v) { return std::isfinite(v); });
}

absl::Status CheckProbabilityRows(const Tensor& targets, const std::string& field,
                                  double tolerance) {
  if (!Checkable(targets) || targets.shape().size() != 2) return absl::OkStatus();
  const int64_t rows = targets.shape()[0], classes = targets.shape()[1];
  const float* p = targets.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const float v = p[r * classes + c];
      if (!(v >= 0.0f && v <= 1.0f)) {
        return absl::InvalidArgumentError(absl::StrCat(field, ": element ", r * classes + c,
                                                       " (row ", r, ", class ", c, ") is ", v,
                                                       "; probabilities must be in [0, 1]"));
      }
      sum += v;
    }
    if (std::fabs(sum - 1.0) > tolerance) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": row ", r, " sums to ", sum,
                                                     "; probabilities must sum to 1 (within ",
                                                     tolerance, ")"));
    }
  }
  return absl::OkStatus();
}

std::string NonFiniteLossReason(double loss) {
  return absl::StrCat("the step's loss is ", loss,
                      " (not finite): its inputs overflow the model's float32 arithmetic");
}

std::string NonFiniteGradientReason(const TrainingGraph& training, size_t parameter) {
  return absl::StrCat("the gradient of parameter '",
                      training.graph.values[training.parameters[parameter]].name,
                      "' is not finite");
}

std::string NonFiniteUpdateReason(const TrainingGraph& training, const Optimizer& optimizer,
                                  const Optimizer::NonFiniteUpdate& bad) {
  return absl::StrCat("the update would make element ", bad.element, " of parameter '",
                      training.graph.values[training.parameters[bad.parameter]].name, "' ",
                      bad.after, " (from ", bad.before, ", gradient ", bad.gradient,
                      ", learning_rate ", optimizer.config().learning_rate, ")");
}

absl::Status StepNotApplied(const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(why, "; the step was not applied and the weights are unchanged"));
}

}  // namespace replicad
