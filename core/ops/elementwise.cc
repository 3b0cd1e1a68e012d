#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// Add, Sub, Mul and Div: two numbers of one dtype, broadcast together.
absl::Status InferBroadcastBinary(KernelSpec* spec) {
  return InferBroadcastPair(spec, kNumericDTypes, std::nullopt);
}

}  // namespace

absl::Status InferAdd(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferMul(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferSub(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferDiv(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferMod(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t fmod, IntAttribute(*spec, "fmod", 0));
  if (fmod != 0 && fmod != 1) {
    return NodeError(*spec, absl::StrCat("attribute 'fmod' must be 0 or 1, received ", fmod));
  }
  REPLICAD_RETURN_IF_ERROR(InferBroadcastPair(spec, kNumericDTypes, std::nullopt));
  if (spec->inputs[0]->dtype == DType::kFloat32 && fmod == 0) {
    return NodeError(*spec, "attribute 'fmod' must be 1 for float32 inputs, received 0");
  }
  return absl::OkStatus();
}

// PRelu: slope broadcasts to X's shape (one way: the output is X's shape).
absl::Status InferPRelu(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_RETURN_IF_ERROR(RequiredInput(*spec, 0, "X").status());
  REPLICAD_RETURN_IF_ERROR(RequiredInput(*spec, 1, "slope").status());
  REPLICAD_RETURN_IF_ERROR(
      InferBroadcastPair(spec, {DType::kFloat32, DType::kInt32, DType::kInt64}, std::nullopt));
  if (spec->outputs[0].shape != spec->inputs[0]->shape) {
    return NodeError(*spec, absl::StrCat("input 1 'slope' must broadcast to the shape of input 0 "
                                         "'X', ",
                                         TensorTypeToString(*spec->inputs[0]), "; received ",
                                         TensorTypeToString(*spec->inputs[1])));
  }
  return absl::OkStatus();
}

absl::Status InferVariadic(KernelSpec* spec) {
  if (spec->inputs.empty()) return NodeError(*spec, "needs at least one input");
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, static_cast<int>(spec->inputs.size())));
  REPLICAD_ASSIGN_OR_RETURN(TensorType first, RequiredInput(*spec, 0, "data_0"));
  // Mean is defined for floats only; Sum, Max and Min for every number type.
  if (spec->op_type == "Mean") {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "data_0", first, {DType::kFloat32}));
  } else {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "data_0", first, kNumericDTypes));
  }
  Shape shape = first.shape;
  for (size_t i = 1; i < spec->inputs.size(); ++i) {
    const std::string name = absl::StrCat("data_", i);
    REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(*spec, static_cast<int>(i), name));
    if (input.dtype != first.dtype) {
      return NodeError(
          *spec, absl::StrCat("input ", i, " '", name, "' must have data_0's dtype ",
                              DTypeName(first.dtype), ", received ", TensorTypeToString(input)));
    }
    const std::optional<Shape> broadcast = BroadcastShapes(shape, input.shape);
    if (!broadcast.has_value()) {
      return NodeError(*spec, absl::StrCat("input ", i, " '", name, "' ", TensorTypeToString(input),
                                           " does not broadcast with the inputs before it, ",
                                           ShapeToString(shape)));
    }
    shape = *broadcast;
  }
  spec->outputs = {TensorType{first.dtype, shape}};
  return absl::OkStatus();
}

absl::Status InferRelu(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  // Relu accepts int64 from opset 14 on.
  if (spec->opset >= 14) {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}, {DType::kInt64}));
  } else {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}));
  }
  spec->outputs = {x};
  return absl::OkStatus();
}

}  // namespace replicad
