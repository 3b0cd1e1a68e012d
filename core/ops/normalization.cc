#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/batch_norm_attributes.h"
#include "core/ops/broadcast.h"
#include "core/ops/layer_norm_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"
#include "core/ops/softmax_attributes.h"

namespace replicad {

absl::StatusOr<BatchNormLayout> ParseBatchNormalization(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 5, 5));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, {DType::kFloat32}));
  const size_t rank = x.shape.size();
  if (rank == 0) {
    return NodeError(
        spec, absl::StrCat("input 0 'X' must have rank >= 1, received ", TensorTypeToString(x)));
  }
  BatchNormLayout layout;
  layout.batch = x.shape[0];
  layout.channels = rank >= 2 ? x.shape[1] : 1;
  for (size_t d = 2; d < rank; ++d) layout.spatial *= x.shape[d];
  const TensorType per_channel{DType::kFloat32, {layout.channels}};
  const char* const names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, i, names[i]));
    if (!(type == per_channel)) {
      return NodeError(
          spec,
          absl::StrCat("input ", i, " '", names[i], "' must be ", TensorTypeToString(per_channel),
                       " for X ", TensorTypeToString(x), ", received ", TensorTypeToString(type)));
    }
  }
  REPLICAD_ASSIGN_OR_RETURN(layout.epsilon, FloatAttribute(spec, "epsilon", 1e-5f));
  // momentum only weighs the statistics that training would update.
  REPLICAD_RETURN_IF_ERROR(FloatAttribute(spec, "momentum", 0.9f).status());
  if (spec.opset >= 14) {
    REPLICAD_ASSIGN_OR_RETURN(int64_t training_mode, IntAttribute(spec, "training_mode", 0));
    if (training_mode != 0) {
      return NodeUnimplemented(
          spec, absl::StrCat("attribute 'training_mode' = ", training_mode,
                             " is not supported; replicad computes the inference form "
                             "(training_mode = 0) with the given input_mean and input_var"));
    }
  }
  return layout;
}

// The statistics outputs of the training form are never inferred, so a node
// asking for them fails when the plan is made.
absl::Status InferBatchNormalization(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseBatchNormalization(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::StatusOr<LayerNormLayout> ParseLayerNormalization(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, {DType::kFloat32}));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) {
    return NodeError(
        spec, absl::StrCat("input 0 'X' must have rank >= 1, received ", TensorTypeToString(x)));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", -1));
  REPLICAD_ASSIGN_OR_RETURN(axis, NormalizeAxis(spec, "axis", axis, rank));
  LayerNormLayout layout;
  for (int64_t d = 0; d < axis; ++d) layout.rows *= x.shape[d];
  for (int64_t d = axis; d < rank; ++d) layout.cols *= x.shape[d];
  REPLICAD_ASSIGN_OR_RETURN(layout.epsilon, FloatAttribute(spec, "epsilon", 1e-5f));
  // Statistics are computed in double whatever stash_type asks for.
  REPLICAD_RETURN_IF_ERROR(IntAttribute(spec, "stash_type", 1).status());
  const Shape normalized(x.shape.begin() + axis, x.shape.end());
  const char* const names[] = {"X", "Scale", "B"};
  for (int i = 1; i < 3; ++i) {
    if (i == 2 && !HasInput(spec, 2)) break;
    REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, i, names[i]));
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, i, names[i], type, {DType::kFloat32}));
    // Leading 1s aside, the parameter must be the normalized dims themselves.
    Shape trimmed = type.shape;
    while (trimmed.size() > normalized.size() && trimmed.front() == 1) {
      trimmed.erase(trimmed.begin());
    }
    if (trimmed == normalized) continue;
    const std::string message = absl::StrCat(
        "input ", i, " '", names[i], "' must have the normalized dims ",
        TensorTypeToString(TensorType{DType::kFloat32, normalized}), " of X ",
        TensorTypeToString(x), " at axis ", axis, ", received ", TensorTypeToString(type));
    if (trimmed.size() <= normalized.size() && BroadcastsTo(trimmed, normalized)) {
      return NodeUnimplemented(spec, message + " (broadcasting within them is not supported)");
    }
    return NodeError(spec, message);
  }
  layout.has_bias = HasInput(spec, 2);
  return layout;
}

absl::Status InferLayerNormalization(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseLayerNormalization(*spec).status());
  const TensorType& x = *spec->inputs[0];
  int64_t axis = IntAttribute(*spec, "axis", -1).value();
  if (axis < 0) axis += static_cast<int64_t>(x.shape.size());
  Shape statistics = x.shape;
  for (size_t d = static_cast<size_t>(axis); d < statistics.size(); ++d) statistics[d] = 1;
  const TensorType stats{DType::kFloat32, statistics};
  spec->outputs = {x, stats, stats};
  return absl::OkStatus();
}

// LogSoftmax shares Softmax's input, axis and opset rules.
absl::Status InferLogSoftmax(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseSoftmaxLayout(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

}  // namespace replicad
