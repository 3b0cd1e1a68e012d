#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// Add, Sub, Mul and Div: two inputs of one dtype, multidirectional broadcasting.
absl::Status InferBroadcastBinary(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType a, RequiredInput(*spec, 0, "A"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType b, RequiredInput(*spec, 1, "B"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "A", a, {DType::kFloat32, DType::kInt64}));
  if (b.dtype != a.dtype) {
    return NodeError(*spec, absl::StrCat("input 1 'B' must have A's dtype ", DTypeName(a.dtype),
                                         ", received ", TensorTypeToString(b)));
  }
  const std::optional<Shape> out = BroadcastShapes(a.shape, b.shape);
  if (!out.has_value()) {
    return NodeError(*spec, absl::StrCat("inputs A ", TensorTypeToString(a), " and B ",
                                         TensorTypeToString(b), " do not broadcast"));
  }
  spec->outputs = {TensorType{a.dtype, *out}};
  return absl::OkStatus();
}

}  // namespace

absl::Status InferAdd(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferMul(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferSub(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferDiv(KernelSpec* spec) { return InferBroadcastBinary(spec); }

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
