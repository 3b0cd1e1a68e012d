// InstanceNormalization and GroupNormalization (group_norm_attributes.h).
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/group_norm_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {

absl::StatusOr<GroupNormLayout> ParseGroupNormalization(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 3, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, {DType::kFloat32}));
  if (x.shape.size() < 2) {
    return NodeError(spec, absl::StrCat("input 0 'X' must be [N, C, spatial...], received ",
                                        TensorTypeToString(x)));
  }
  GroupNormLayout layout;
  layout.batch = x.shape[0];
  layout.channels = x.shape[1];
  for (size_t d = 2; d < x.shape.size(); ++d) layout.spatial *= x.shape[d];
  REPLICAD_ASSIGN_OR_RETURN(layout.epsilon, FloatAttribute(spec, "epsilon", 1e-5f));
  const bool instance = spec.op_type == "InstanceNormalization";
  if (instance) {
    layout.groups = layout.channels;
  } else {
    REPLICAD_ASSIGN_OR_RETURN(layout.groups, IntAttribute(spec, "num_groups", 0));
    if (layout.groups < 1 || layout.channels % layout.groups != 0) {
      return NodeError(spec, absl::StrCat("attribute 'num_groups' must divide input 0's ",
                                          layout.channels, " channels, received ", layout.groups));
    }
    layout.affine_per_group = spec.opset < 21;
  }
  const int64_t affine = layout.affine_per_group ? layout.groups : layout.channels;
  const char* names[] = {"scale", instance ? "B" : "bias"};
  for (int i = 1; i <= 2; ++i) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, i, names[i - 1]));
    if (type.dtype != DType::kFloat32 || type.shape != Shape{affine}) {
      return NodeError(
          spec, absl::StrCat("input ", i, " '", names[i - 1], "' must be float32[", affine, "]",
                             layout.affine_per_group ? " (one per group before "
                                                       "opset 21)"
                                                     : "",
                             ", received ", TensorTypeToString(type)));
    }
  }
  return layout;
}

absl::Status InferGroupNormalization(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseGroupNormalization(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

}  // namespace replicad
