#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"
#include "core/ops/softmax_attributes.h"

namespace replicad {

absl::StatusOr<SoftmaxLayout> ParseSoftmaxLayout(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "input"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "input", x, {DType::kFloat32}));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const bool coerce_2d = spec.opset < 13;
  if (rank == 0) {
    return NodeError(spec, absl::StrCat("input 0 'input' must have rank >= 1, received ",
                                        TensorTypeToString(x)));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", coerce_2d ? 1 : -1));
  REPLICAD_ASSIGN_OR_RETURN(axis, NormalizeAxis(spec, "axis", axis, rank));
  SoftmaxLayout layout;
  for (int64_t i = 0; i < axis; ++i) layout.outer *= x.shape[i];
  if (coerce_2d) {
    for (int64_t i = axis; i < rank; ++i) layout.axis_size *= x.shape[i];
  } else {
    layout.axis_size = x.shape[axis];
    for (int64_t i = axis + 1; i < rank; ++i) layout.inner *= x.shape[i];
  }
  return layout;
}

absl::Status InferSoftmax(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseSoftmaxLayout(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

}  // namespace replicad
