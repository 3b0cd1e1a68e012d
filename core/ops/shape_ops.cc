#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {

absl::Status InferIdentity(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "input"));
  spec->outputs = {x};
  return absl::OkStatus();
}

absl::Status InferFlatten(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "input"));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(*spec, "axis", 1));
  REPLICAD_ASSIGN_OR_RETURN(axis, NormalizeAxis(*spec, "axis", axis, rank, /*inclusive_end=*/true));
  int64_t outer = 1;
  int64_t inner = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= x.shape[i];
  spec->outputs = {TensorType{x.dtype, {outer, inner}}};
  return absl::OkStatus();
}

absl::Status InferReshape(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(*spec, 0, "data"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType shape_type, RequiredInput(*spec, 1, "shape"));
  if (shape_type.dtype != DType::kInt64 || shape_type.shape.size() != 1) {
    return NodeError(*spec, absl::StrCat("input 1 'shape' must be 1-D int64, received ",
                                         TensorTypeToString(shape_type)));
  }
  const Tensor* shape_value = ConstantInput(*spec, 1);
  if (shape_value == nullptr) {
    return NodeUnimplemented(*spec,
                             "input 1 'shape' must be known when the plan is made (an "
                             "initializer or a Constant output); replicad plans static "
                             "shapes");
  }
  if (!(shape_value->type() == shape_type)) {
    return NodeError(
        *spec,
        absl::StrCat("input 1 'shape' is declared ", TensorTypeToString(shape_type),
                     " but its constant value is ", TensorTypeToString(shape_value->type())));
  }
  // allowzero arrived in opset 14; earlier opsets always copy a 0 from the input.
  REPLICAD_ASSIGN_OR_RETURN(int64_t allowzero, spec->opset >= 14
                                                   ? IntAttribute(*spec, "allowzero", 0)
                                                   : absl::StatusOr<int64_t>(0));
  const int64_t* requested = shape_value->data<int64_t>();
  const int64_t rank = shape_value->num_elements();
  const std::string requested_text =
      absl::StrCat("[", absl::StrJoin(requested, requested + rank, ","), "]");
  Shape out(rank);
  int64_t inferred = -1;
  bool has_zero = false;
  int64_t known = 1;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t dim = requested[i];
    if (dim == -1) {
      if (inferred >= 0) {
        return NodeError(*spec,
                         absl::StrCat("input 1 'shape' ", requested_text, " has more than one -1"));
      }
      inferred = i;
      continue;
    }
    if (dim < -1) {
      return NodeError(*spec,
                       absl::StrCat("input 1 'shape' ", requested_text, " has a dim below -1"));
    }
    if (dim == 0) {
      has_zero = true;
      if (allowzero == 0) {
        if (i >= static_cast<int64_t>(data.shape.size())) {
          return NodeError(*spec, absl::StrCat("input 1 'shape' ", requested_text, " copies dim ",
                                               i, " (a 0) from data ", TensorTypeToString(data),
                                               ", which has no dim ", i));
        }
        out[i] = data.shape[i];
        known *= out[i];
        continue;
      }
    }
    out[i] = dim;
    known *= dim;
  }
  if (allowzero != 0 && has_zero && inferred >= 0) {
    return NodeError(*spec, absl::StrCat("input 1 'shape' ", requested_text,
                                         " combines 0 and -1 while allowzero=1"));
  }
  const int64_t total = NumElements(data.shape);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0) {
      return NodeError(*spec, absl::StrCat("cannot infer the -1 in shape ", requested_text,
                                           " for data ", TensorTypeToString(data)));
    }
    out[inferred] = total / known;
  }
  if (NumElements(out) != total) {
    return NodeError(
        *spec, absl::StrCat("shape ", requested_text, " resolves to ", ShapeToString(out), " with ",
                            NumElements(out), " elements, but data ", TensorTypeToString(data),
                            " has ", total));
  }
  spec->outputs = {TensorType{data.dtype, std::move(out)}};
  return absl::OkStatus();
}

}  // namespace replicad
