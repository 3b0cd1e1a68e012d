// Comparisons, boolean logic and Where: the ops that make and read the bool
// masks of attention (a padding mask from token ids, a causal mask) and the
// shape arithmetic exporters write around them.
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {

absl::Status InferEqual(KernelSpec* spec) {
  return InferBroadcastPair(spec, kNumericOrBoolDTypes, DType::kBool);
}

absl::Status InferOrderComparison(KernelSpec* spec) {
  return InferBroadcastPair(spec, kNumericDTypes, DType::kBool);
}

absl::Status InferLogicalBinary(KernelSpec* spec) {
  return InferBroadcastPair(spec, {DType::kBool}, DType::kBool);
}

absl::Status InferNot(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kBool}));
  spec->outputs = {x};
  return absl::OkStatus();
}

absl::Status InferWhere(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 3, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType condition, RequiredInput(*spec, 0, "condition"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 1, "X"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType y, RequiredInput(*spec, 2, "Y"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "condition", condition, {DType::kBool}));
  if (y.dtype != x.dtype) {
    return NodeError(*spec, absl::StrCat("input 2 'Y' must have X's dtype ", DTypeName(x.dtype),
                                         ", received ", TensorTypeToString(y)));
  }
  std::optional<Shape> shape = BroadcastShapes(condition.shape, x.shape);
  if (shape.has_value()) shape = BroadcastShapes(*shape, y.shape);
  if (!shape.has_value()) {
    return NodeError(*spec, absl::StrCat("inputs condition ", TensorTypeToString(condition), ", X ",
                                         TensorTypeToString(x), " and Y ", TensorTypeToString(y),
                                         " do not broadcast"));
  }
  spec->outputs = {TensorType{x.dtype, *shape}};
  return absl::OkStatus();
}

}  // namespace replicad
