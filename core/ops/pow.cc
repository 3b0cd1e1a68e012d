#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {

// Z = X ^ Y with multidirectional broadcasting; Z has X's dtype. Before
// opset 12 both operands are one float type; from 12 the base may be an
// integer and the exponent any numeric type.
absl::Status InferPow(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType y, RequiredInput(*spec, 1, "Y"));
  if (spec->opset >= 12) {
    REPLICAD_RETURN_IF_ERROR(
        CheckInputDType(*spec, 0, "X", x, {DType::kFloat32, DType::kInt64}, {DType::kInt32}));
    REPLICAD_RETURN_IF_ERROR(
        CheckInputDType(*spec, 1, "Y", y, {DType::kFloat32, DType::kInt64}, kNumericDTypes));
  } else {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}));
    if (y.dtype != x.dtype) {
      return NodeError(*spec, absl::StrCat("input 1 'Y' must have X's dtype ", DTypeName(x.dtype),
                                           " before opset 12, received ", TensorTypeToString(y)));
    }
  }
  const std::optional<Shape> out = BroadcastShapes(x.shape, y.shape);
  if (!out.has_value()) {
    return NodeError(*spec, absl::StrCat("inputs X ", TensorTypeToString(x), " and Y ",
                                         TensorTypeToString(y), " do not broadcast"));
  }
  spec->outputs = {TensorType{x.dtype, *out}};
  return absl::OkStatus();
}

}  // namespace replicad
