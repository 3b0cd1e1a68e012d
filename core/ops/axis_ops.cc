// ArgMax, ArgMin, Hardmax, CumSum and TopK (axis_attributes.h).
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/axis_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"
#include "core/ops/value_input.h"

namespace replicad {
namespace {

// Input 0's lines along `axis` (checked against its rank, named `what`).
absl::StatusOr<AxisLines> LinesOf(const KernelSpec& spec, const TensorType& data, int64_t axis,
                                  absl::string_view what) {
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  if (rank == 0) {
    return NodeError(
        spec, absl::StrCat("input 0 must have rank >= 1, received ", TensorTypeToString(data)));
  }
  AxisLines lines;
  REPLICAD_ASSIGN_OR_RETURN(lines.axis, NormalizeAxis(spec, what, axis, rank));
  lines.axis_dim = data.shape[lines.axis];
  for (int64_t d = 0; d < lines.axis; ++d) lines.outer *= data.shape[d];
  for (int64_t d = lines.axis + 1; d < rank; ++d) lines.inner *= data.shape[d];
  return lines;
}

// The shape of input 0 with its axis set to `size` (dropped when size < 0).
Shape WithAxis(const TensorType& data, int64_t axis, int64_t size) {
  Shape shape = data.shape;
  if (size < 0) {
    shape.erase(shape.begin() + axis);
  } else {
    shape[axis] = size;
  }
  return shape;
}

}  // namespace

absl::StatusOr<ArgReduceAttributes> ParseArgReduce(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "data", data, kNumericDTypes));
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", 0));
  ArgReduceAttributes attributes;
  REPLICAD_ASSIGN_OR_RETURN(attributes.lines, LinesOf(spec, data, axis, "axis"));
  REPLICAD_ASSIGN_OR_RETURN(int64_t keepdims, IntAttribute(spec, "keepdims", 1));
  REPLICAD_ASSIGN_OR_RETURN(int64_t last, IntAttribute(spec, "select_last_index", 0));
  attributes.keepdims = keepdims != 0;
  attributes.last_index = last != 0;
  if (attributes.lines.axis_dim == 0 && attributes.lines.outer * attributes.lines.inner > 0) {
    return NodeError(spec, absl::StrCat("input 0 'data' has no elements along axis ",
                                        attributes.lines.axis, ", so it has no ", spec.op_type,
                                        "; received ", TensorTypeToString(data)));
  }
  return attributes;
}

absl::Status InferArgReduce(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(ArgReduceAttributes attributes, ParseArgReduce(*spec));
  spec->outputs = {TensorType{DType::kInt64, WithAxis(*spec->inputs[0], attributes.lines.axis,
                                                      attributes.keepdims ? 1 : -1)}};
  return absl::OkStatus();
}

absl::StatusOr<AxisLines> ParseHardmax(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(spec, 0, "input"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "input", input, {DType::kFloat32}));
  const bool coerced_to_2d = spec.opset < 13;
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", coerced_to_2d ? 1 : -1));
  REPLICAD_ASSIGN_OR_RETURN(AxisLines lines, LinesOf(spec, input, axis, "axis"));
  if (coerced_to_2d) {
    lines.axis_dim *= lines.inner;
    lines.inner = 1;
  }
  return lines;
}

absl::Status InferHardmax(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseHardmax(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::StatusOr<CumSumAttributes> ParseCumSum(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "x"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(
      spec, 0, "x", x, {DType::kFloat32, DType::kInt32, DType::kInt64}, kNumericDTypes));
  REPLICAD_ASSIGN_OR_RETURN(TensorType axis_type, RequiredInput(spec, 1, "axis"));
  if ((axis_type.dtype != DType::kInt64 && axis_type.dtype != DType::kInt32) ||
      axis_type.shape.size() > 1 || NumElements(axis_type.shape) != 1) {
    return NodeError(spec, absl::StrCat("input 1 'axis' must be one int32 or int64, received ",
                                        TensorTypeToString(axis_type)));
  }
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* axis_value, ValueInput(spec, 1, "axis"));
  const int64_t axis = axis_type.dtype == DType::kInt64 ? axis_value->data<int64_t>()[0]
                                                        : axis_value->data<int32_t>()[0];
  // The axis is an input, not an attribute: checked here to say so.
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank > 0 && (axis < -rank || axis >= rank)) {
    return NodeError(spec, absl::StrCat("input 1 'axis' must be in [", -rank, ", ", rank - 1,
                                        "] for rank ", rank, ", received ", axis));
  }
  CumSumAttributes attributes;
  REPLICAD_ASSIGN_OR_RETURN(attributes.lines, LinesOf(spec, x, axis, "axis"));
  REPLICAD_ASSIGN_OR_RETURN(int64_t exclusive, IntAttribute(spec, "exclusive", 0));
  REPLICAD_ASSIGN_OR_RETURN(int64_t reverse, IntAttribute(spec, "reverse", 0));
  attributes.exclusive = exclusive != 0;
  attributes.reverse = reverse != 0;
  return attributes;
}

absl::Status InferCumSum(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseCumSum(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::StatusOr<TopKAttributes> ParseTopK(const KernelSpec& spec) {
  const bool k_is_input = spec.opset >= 10;
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, k_is_input ? 2 : 1, k_is_input ? 2 : 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, kNumericDTypes));
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", -1));
  TopKAttributes attributes;
  REPLICAD_ASSIGN_OR_RETURN(attributes.lines, LinesOf(spec, x, axis, "axis"));
  if (k_is_input) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType k_type, RequiredInput(spec, 1, "K"));
    if (k_type.dtype != DType::kInt64 || k_type.shape.size() != 1 || k_type.shape[0] != 1) {
      return NodeError(spec, absl::StrCat("input 1 'K' must be int64[1], received ",
                                          TensorTypeToString(k_type)));
    }
    if (ConstantInput(spec, 1) == nullptr) {
      return NodeUnimplemented(spec,
                               "input 1 'K' is computed from the request, so the output "
                               "shape would depend on the data; replicad plans shapes "
                               "before a request runs and needs K known then (a constant)");
    }
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> k, Int64ValueInput(spec, 1, "K"));
    attributes.k = k[0];
  } else {
    REPLICAD_ASSIGN_OR_RETURN(attributes.k, IntAttribute(spec, "k", -1));
  }
  if (attributes.k < 0 || attributes.k > attributes.lines.axis_dim) {
    return NodeError(spec, absl::StrCat(k_is_input ? "input 1 'K'" : "attribute 'k'",
                                        " must be in [0, ", attributes.lines.axis_dim,
                                        "] (the axis' size), received ", attributes.k));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t largest, IntAttribute(spec, "largest", 1));
  attributes.largest = largest != 0;
  return attributes;
}

absl::Status InferTopK(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(TopKAttributes attributes, ParseTopK(*spec));
  const Shape shape = WithAxis(*spec->inputs[0], attributes.lines.axis, attributes.k);
  spec->outputs = {TensorType{spec->inputs[0]->dtype, shape}, TensorType{DType::kInt64, shape}};
  return absl::OkStatus();
}

}  // namespace replicad
