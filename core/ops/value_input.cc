#include "core/ops/value_input.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {

absl::StatusOr<const Tensor*> ValueInput(const KernelSpec& spec, int index,
                                         absl::string_view name) {
  REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, index, name));
  const Tensor* value = ConstantInput(spec, index);
  if (value == nullptr) {
    return NodeUnimplemented(
        spec, absl::StrCat("input ", index, " '", name,
                           "' must be known when the plan is made (an initializer, a Constant "
                           "or computed from them); replicad plans static shapes"));
  }
  if (!(value->type() == type)) {
    return NodeError(
        spec, absl::StrCat("input ", index, " '", name, "' is declared ", TensorTypeToString(type),
                           " but its constant value is ", TensorTypeToString(value->type())));
  }
  if (value->location().kind != MemoryKind::kHost) {
    return NodeUnimplemented(
        spec, absl::StrCat("the value of input ", index, " '", name, "' lives in ",
                           MemoryLocationToString(value->location()), "; expected host memory"));
  }
  return value;
}

absl::StatusOr<std::vector<int64_t>> Int64ValueInput(const KernelSpec& spec, int index,
                                                     absl::string_view name) {
  REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, index, name));
  if (type.dtype != DType::kInt64 || type.shape.size() != 1) {
    return NodeError(spec,
                     absl::StrCat("input ", index, " '", name, "' must be 1-D int64, received ",
                                  TensorTypeToString(type)));
  }
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* value, ValueInput(spec, index, name));
  const int64_t* data = value->data<int64_t>();
  return std::vector<int64_t>(data, data + value->num_elements());
}

absl::StatusOr<std::vector<int64_t>> NormalizeAxes(const KernelSpec& spec,
                                                   const std::vector<int64_t>& axes, int64_t rank,
                                                   absl::string_view what) {
  const std::string received = absl::StrCat("[", absl::StrJoin(axes, ","), "]");
  std::vector<int64_t> normalized;
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      return NodeError(spec, absl::StrCat(what, " ", received, " must hold axes in [", -rank, ", ",
                                          rank - 1, "] for rank ", rank));
    }
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (std::find(normalized.begin(), normalized.end(), a) != normalized.end()) {
      return NodeError(spec, absl::StrCat(what, " ", received, " names axis ", a,
                                          " twice; expected distinct axes"));
    }
    normalized.push_back(a);
  }
  return normalized;
}

}  // namespace replicad
