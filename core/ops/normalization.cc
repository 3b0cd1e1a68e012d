#include <string>

#include "absl/strings/str_cat.h"
#include "core/ops/batch_norm_attributes.h"
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

// LogSoftmax shares Softmax's input, axis and opset rules.
absl::Status InferLogSoftmax(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseSoftmaxLayout(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

}  // namespace replicad
