#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/activation_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// One float32 input named `name`; the output has its type. `onnx_allows`
// lists the other dtypes ONNX accepts for the op (Unimplemented, not
// InvalidArgument, when received).
absl::Status InferFloatUnary(KernelSpec* spec, absl::string_view name,
                             std::initializer_list<DType> onnx_allows = {}) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, name));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, name, x, {DType::kFloat32}, onnx_allows));
  REPLICAD_RETURN_IF_ERROR(ParseActivationAttributes(*spec).status());
  spec->outputs = {x};
  return absl::OkStatus();
}

// An optional scalar input (Clip's bounds, Dropout's ratio): present means
// exactly one element of `dtype`. ONNX asks for rank 0; exporters also write
// [1], which means the same value.
absl::Status CheckOptionalScalar(const KernelSpec& spec, int index, absl::string_view name,
                                 DType dtype) {
  if (!HasInput(spec, index)) return absl::OkStatus();
  const TensorType& type = *spec.inputs[index];
  if (type.dtype != dtype || NumElements(type.shape) != 1) {
    return NodeError(spec,
                     absl::StrCat("input ", index, " '", name, "' must be a ", DTypeName(dtype),
                                  " scalar, received ", TensorTypeToString(type)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ActivationAttributes> ParseActivationAttributes(const KernelSpec& spec) {
  ActivationAttributes attributes;
  if (spec.op_type == "LeakyRelu") {
    REPLICAD_ASSIGN_OR_RETURN(attributes.alpha, FloatAttribute(spec, "alpha", 0.01f));
  } else if (spec.op_type == "HardSigmoid") {
    REPLICAD_ASSIGN_OR_RETURN(attributes.alpha, FloatAttribute(spec, "alpha", 0.2f));
    REPLICAD_ASSIGN_OR_RETURN(attributes.beta, FloatAttribute(spec, "beta", 0.5f));
  } else if (spec.op_type == "Elu") {
    REPLICAD_ASSIGN_OR_RETURN(attributes.alpha, FloatAttribute(spec, "alpha", 1.0f));
  } else if (spec.op_type == "Selu") {
    REPLICAD_ASSIGN_OR_RETURN(attributes.alpha,
                              FloatAttribute(spec, "alpha", 1.67326319217681884765625f));
    REPLICAD_ASSIGN_OR_RETURN(attributes.beta,
                              FloatAttribute(spec, "gamma", 1.05070102214813232421875f));
  }
  return attributes;
}

absl::Status InferSigmoid(KernelSpec* spec) { return InferFloatUnary(spec, "X"); }

absl::Status InferTanh(KernelSpec* spec) { return InferFloatUnary(spec, "input"); }

absl::Status InferLeakyRelu(KernelSpec* spec) { return InferFloatUnary(spec, "X"); }

absl::Status InferHardSigmoid(KernelSpec* spec) { return InferFloatUnary(spec, "X"); }

absl::Status InferHardSwish(KernelSpec* spec) { return InferFloatUnary(spec, "X"); }

absl::Status InferSqrt(KernelSpec* spec) { return InferFloatUnary(spec, "X"); }

// Exp, Log, Reciprocal, Softplus, Elu, Selu, Mish, Floor, Ceil and Round:
// float32 (ONNX also allows float16 and double, which replicad does not hold).
absl::Status InferFloatMath(KernelSpec* spec) {
  return InferFloatUnary(spec,
                         spec->op_type == "Softplus" || spec->op_type == "Mish" ? "X" : "input");
}

// Gelu (opset 20): the exact form (erf) or, with approximate "tanh", the
// tanh approximation.
absl::Status InferGelu(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(InferFloatUnary(spec, "X"));
  REPLICAD_ASSIGN_OR_RETURN(std::string approximate, StringAttribute(*spec, "approximate", "none"));
  if (approximate != "none" && approximate != "tanh") {
    return NodeError(*spec, absl::StrCat("attribute 'approximate' must be \"none\" or \"tanh\", "
                                         "received \"",
                                         approximate, "\""));
  }
  return absl::OkStatus();
}

// Abs and Neg take every number type.
absl::Status InferSignedMath(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, kNumericDTypes));
  spec->outputs = {x};
  return absl::OkStatus();
}

// Erf is defined for every numeric type; only float32 is computed.
absl::Status InferErf(KernelSpec* spec) { return InferFloatUnary(spec, "input", {DType::kInt64}); }

absl::Status InferClip(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "input"));
  // Integer types arrived in opset 12.
  if (spec->opset >= 12) {
    REPLICAD_RETURN_IF_ERROR(
        CheckInputDType(*spec, 0, "input", x, {DType::kFloat32, DType::kInt64}, kNumericDTypes));
  } else {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "input", x, {DType::kFloat32}));
  }
  REPLICAD_RETURN_IF_ERROR(CheckOptionalScalar(*spec, 1, "min", x.dtype));
  REPLICAD_RETURN_IF_ERROR(CheckOptionalScalar(*spec, 2, "max", x.dtype));
  spec->outputs = {x};
  return absl::OkStatus();
}

absl::Status InferDropout(KernelSpec* spec) {
  // Opset 12 moved `ratio` from an attribute to input 1 and added input 2
  // 'training_mode'.
  const bool ratio_is_input = spec->opset >= 12;
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, ratio_is_input ? 3 : 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(*spec, 0, "data"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "data", data, {DType::kFloat32}));
  if (ratio_is_input) {
    REPLICAD_RETURN_IF_ERROR(CheckOptionalScalar(*spec, 1, "ratio", DType::kFloat32));
    if (HasInput(*spec, 2)) {
      // A bool input cannot reach replicad, and a constant false would be
      // the same as leaving it out; only inference is computed.
      return NodeUnimplemented(*spec,
                               absl::StrCat("input 2 'training_mode' is not supported (received ",
                                            TensorTypeToString(*spec->inputs[2]),
                                            "); replicad computes Dropout in inference mode only"));
    }
  } else {
    REPLICAD_RETURN_IF_ERROR(FloatAttribute(*spec, "ratio", 0.5f).status());
  }
  // In inference Dropout is the identity. Its optional second output, the
  // bool mask, is not inferred: replicad has no bool tensors, so a node that
  // asks for it fails when the plan is made.
  spec->outputs = {data};
  return absl::OkStatus();
}

}  // namespace replicad
