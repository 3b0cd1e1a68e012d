// Shape rules of the training-only operators (see training_ops.h).

#include "core/ops/training_ops.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/dropout_train_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/optimizer_step_attributes.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

absl::Status CheckGradient(const KernelSpec& spec, int index, const TensorType& expected) {
  REPLICAD_ASSIGN_OR_RETURN(TensorType gradient, RequiredInput(spec, index, "dY"));
  if (!(gradient == expected)) {
    return NodeError(spec, absl::StrCat("input dY must be ", TensorTypeToString(expected),
                                        ", received ", TensorTypeToString(gradient)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InferReluGrad(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType y, RequiredInput(*spec, 0, "Y"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "Y", y, {DType::kFloat32}));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 1, y));
  spec->outputs = {y};
  return absl::OkStatus();
}

absl::Status InferBatchNormTrain(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 5, 5));
  KernelSpec forward = ForwardInputs(*spec, 5);
  REPLICAD_RETURN_IF_ERROR(InferBatchNormalization(&forward));
  const TensorType& per_channel = *spec->inputs[1];
  spec->outputs = {*spec->inputs[0], per_channel, per_channel, per_channel, per_channel};
  return absl::OkStatus();
}

absl::Status InferBatchNormGrad(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 5, 5));
  // The forward rule checks X against scale; saved statistics are per channel too.
  KernelSpec forward = ForwardInputs(*spec, 5);
  forward.inputs[4] = forward.inputs[3];
  REPLICAD_RETURN_IF_ERROR(InferBatchNormalization(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 4, *spec->inputs[0]));
  const TensorType& per_channel = *spec->inputs[1];
  spec->outputs = {*spec->inputs[0], per_channel, per_channel};
  return absl::OkStatus();
}

absl::Status InferDropoutTrain(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 2));
  KernelSpec forward = ForwardInputs(*spec, spec->inputs.size());
  REPLICAD_RETURN_IF_ERROR(InferDropout(&forward));
  if (HasInput(*spec, 1) && ConstantInput(*spec, 1) == nullptr) {
    return NodeUnimplemented(*spec, "a Dropout ratio computed at run time is not supported");
  }
  spec->outputs = {*spec->inputs[0], *spec->inputs[0]};
  return absl::OkStatus();
}

absl::Status InferAveragePoolGrad(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  KernelSpec forward = ForwardInputs(*spec, 1);
  REPLICAD_RETURN_IF_ERROR(InferAveragePool(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 1, forward.outputs[0]));
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::Status InferConcatGrad(KernelSpec* spec) {
  if (spec->inputs.size() < 2) return NodeError(*spec, "expects dY and at least one input");
  KernelSpec forward = WithoutFirstInput(*spec);
  REPLICAD_RETURN_IF_ERROR(InferConcat(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 0, forward.outputs[0]));
  spec->outputs.clear();
  for (const std::optional<TensorType>& input : forward.inputs) spec->outputs.push_back(*input);
  return absl::OkStatus();
}

absl::Status InferPadGrad(KernelSpec* spec) {
  if (spec->inputs.size() < 3) return NodeError(*spec, "expects dY, X and pads");
  KernelSpec forward = WithoutFirstInput(*spec);  // Pad's inputs: all but dY.
  REPLICAD_RETURN_IF_ERROR(InferPad(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 0, forward.outputs[0]));
  spec->outputs = {*spec->inputs[1]};
  return absl::OkStatus();
}

absl::Status InferSliceGrad(KernelSpec* spec) {
  if (spec->inputs.size() < 4) return NodeError(*spec, "expects dY, X, starts and ends");
  KernelSpec forward = WithoutFirstInput(*spec);  // Slice's inputs: all but dY.
  REPLICAD_RETURN_IF_ERROR(InferSlice(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 0, forward.outputs[0]));
  spec->outputs = {*spec->inputs[1]};
  return absl::OkStatus();
}

absl::Status InferClipGrad(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 4));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 1, x));
  for (int i = 2; i < static_cast<int>(spec->inputs.size()); ++i) {
    if (HasInput(*spec, i) && ConstantInput(*spec, i) == nullptr) {
      return NodeUnimplemented(*spec, "Clip bounds computed at run time have no gradient yet");
    }
  }
  spec->outputs = {x};
  return absl::OkStatus();
}

// Softmax and LogSoftmax backward: the forward node's layout rule on Y.
absl::Status InferSoftmaxFamilyGrad(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  KernelSpec forward = ForwardInputs(*spec, 1);
  REPLICAD_RETURN_IF_ERROR(InferSoftmax(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 1, *spec->inputs[0]));
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::Status InferGlobalAveragePoolGrad(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  KernelSpec forward = ForwardInputs(*spec, 1);
  REPLICAD_RETURN_IF_ERROR(InferGlobalAveragePool(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 1, forward.outputs[0]));
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::Status InferMaxPoolGrad(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  KernelSpec forward = ForwardInputs(*spec, 1);
  REPLICAD_RETURN_IF_ERROR(InferMaxPool(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 1, forward.outputs[0]));
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::Status InferConvGradData(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 3, 3));
  KernelSpec forward = ForwardInputs(*spec, 2);
  REPLICAD_RETURN_IF_ERROR(InferConv(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 2, forward.outputs[0]));
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::Status InferConvGradFilter(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 3, 3));
  KernelSpec forward = ForwardInputs(*spec, 2);
  REPLICAD_RETURN_IF_ERROR(InferConv(&forward));
  REPLICAD_RETURN_IF_ERROR(CheckGradient(*spec, 2, forward.outputs[0]));
  const Shape& w = spec->inputs[1]->shape;
  spec->outputs = {*spec->inputs[1], TensorType{DType::kFloat32, {w[0]}}};
  return absl::OkStatus();
}

absl::Status InferSumToShape(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType gradient, RequiredInput(*spec, 0, "dY"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType like, RequiredInput(*spec, 1, "Like"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "dY", gradient, {DType::kFloat32}));
  std::optional<Shape> broadcast = BroadcastShapes(like.shape, gradient.shape);
  if (!broadcast || *broadcast != gradient.shape) {
    return NodeError(
        *spec, absl::StrCat("Like ", ShapeToString(like.shape), " must broadcast to dY's shape ",
                            ShapeToString(gradient.shape)));
  }
  spec->outputs = {TensorType{DType::kFloat32, like.shape}};
  return absl::OkStatus();
}

absl::Status InferSoftmaxCrossEntropy(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType logits, RequiredInput(*spec, 0, "logits"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType targets, RequiredInput(*spec, 1, "targets"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "logits", logits, {DType::kFloat32}));
  if (logits.shape.size() != 2 || logits.shape[1] < 1) {
    return NodeError(*spec, absl::StrCat("logits must be [N, C] with C >= 1, received ",
                                         ShapeToString(logits.shape)));
  }
  const bool labels = targets.dtype == DType::kInt64 && targets.shape == Shape{logits.shape[0]};
  const bool probabilities = targets.dtype == DType::kFloat32 && targets.shape == logits.shape;
  if (!labels && !probabilities) {
    return NodeError(*spec, absl::StrCat("targets must be int64[", logits.shape[0],
                                         "] class labels or float32", ShapeToString(logits.shape),
                                         " probabilities, received ", TensorTypeToString(targets)));
  }
  spec->outputs = {TensorType{DType::kFloat32, {}}, TensorType{DType::kFloat32, {}}, logits};
  return absl::OkStatus();
}

absl::Status InferMeanSquaredError(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType y, RequiredInput(*spec, 0, "Y"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType targets, RequiredInput(*spec, 1, "targets"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "Y", y, {DType::kFloat32}));
  if (y.shape.empty() || !(targets == y)) {
    return NodeError(*spec,
                     absl::StrCat("targets must be ", TensorTypeToString(y),
                                  " like Y (rank >= 1), received ", TensorTypeToString(targets)));
  }
  spec->outputs = {TensorType{DType::kFloat32, {}}, y};
  return absl::OkStatus();
}

absl::Status InferAllFinite(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}));
  spec->outputs = {TensorType{DType::kFloat32, {}}};
  return absl::OkStatus();
}

absl::Status InferOptimizerDryRun(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerConfig config, ParseOptimizerStep(*spec));
  const size_t per_parameter = 2 + OptimizerStateNames(config.kind, config.momentum).size();
  if (spec->inputs.empty() || spec->inputs.size() % per_parameter != 0) {
    return NodeError(
        *spec,
        absl::StrCat("takes ", per_parameter, " inputs per parameter (G, P and the state of ",
                     OptimizerKindName(config.kind), "), received ", spec->inputs.size()));
  }
  const size_t parameters = spec->inputs.size() / per_parameter;
  for (size_t j = 0; j < parameters; ++j) {
    const int first = static_cast<int>(j * per_parameter);
    REPLICAD_ASSIGN_OR_RETURN(TensorType gradient, RequiredInput(*spec, first, "G"));
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, first, "G", gradient, {DType::kFloat32}));
    for (int i = first + 1; i < first + static_cast<int>(per_parameter); ++i) {
      REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(*spec, i, "P or a state tensor"));
      if (!(input == gradient)) {
        return NodeError(*spec, absl::StrCat("input ", i, " must be ", TensorTypeToString(gradient),
                                             " like its G (input ", first, "), received ",
                                             TensorTypeToString(input)));
      }
    }
  }
  spec->outputs.assign(parameters, TensorType{DType::kFloat32, {}});
  return absl::OkStatus();
}

absl::Status InferOptimizerStep(KernelSpec* spec) {
  if (spec->inputs.empty()) {
    return NodeError(*spec, "takes at least 1 input (one gradient per parameter), received 0");
  }
  REPLICAD_ASSIGN_OR_RETURN(OptimizerConfig config, ParseOptimizerStep(*spec));
  const size_t per_parameter = 1 + OptimizerStateNames(config.kind, config.momentum).size();
  std::vector<TensorType> outputs;
  outputs.reserve(spec->inputs.size() * per_parameter);
  for (size_t j = 0; j < spec->inputs.size(); ++j) {
    const int input = static_cast<int>(j);
    REPLICAD_ASSIGN_OR_RETURN(TensorType gradient, RequiredInput(*spec, input, "G"));
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, input, "G", gradient, {DType::kFloat32}));
    outputs.insert(outputs.end(), per_parameter, gradient);
  }
  spec->outputs = std::move(outputs);
  return absl::OkStatus();
}

absl::StatusOr<DropoutTrainAttributes> ParseDropoutTrainAttributes(const KernelSpec& spec) {
  DropoutTrainAttributes parsed;
  if (spec.opset < 12) {
    REPLICAD_ASSIGN_OR_RETURN(parsed.ratio, FloatAttribute(spec, "ratio", 0.5f));
  } else if (const Tensor* given = ConstantInput(spec, 1)) {
    parsed.ratio = *given->data<float>();
  }
  if (!(parsed.ratio >= 0.0f && parsed.ratio < 1.0f)) {
    return NodeError(spec, absl::StrCat("ratio must be in [0, 1), received ", parsed.ratio));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t node_seed, IntAttribute(spec, "replicad.node_seed", 0));
  parsed.node_seed = static_cast<uint64_t>(node_seed);
  const Shape& x = spec.inputs[0]->shape;
  parsed.rows = x.empty() ? 1 : x[0];
  parsed.row_size = parsed.rows == 0 ? 0 : NumElements(x) / parsed.rows;
  return parsed;
}

}  // namespace replicad
