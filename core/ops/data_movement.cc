#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"
#include "core/ops/value_input.h"

namespace replicad {
namespace {

// Squeeze and Unsqueeze take `axes` as an attribute before opset 13 and as
// input 1 from opset 13. nullopt when absent (allowed for Squeeze only).
absl::StatusOr<std::optional<std::vector<int64_t>>> ReadAxes(const KernelSpec& spec) {
  if (spec.opset < 13) {
    REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
    if (!spec.attributes->Has("axes")) return std::optional<std::vector<int64_t>>();
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntsAttribute(spec, "axes", {}));
    return std::optional<std::vector<int64_t>>(std::move(axes));
  }
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 2));
  if (!HasInput(spec, 1)) return std::optional<std::vector<int64_t>>();
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, Int64ValueInput(spec, 1, "axes"));
  return std::optional<std::vector<int64_t>>(std::move(axes));
}

std::string AxesName(const KernelSpec& spec) {
  return spec.opset < 13 ? "attribute 'axes'" : "input 1 'axes'";
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseTransposePerm(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  std::vector<int64_t> reversed(rank);
  for (int64_t i = 0; i < rank; ++i) reversed[i] = rank - 1 - i;
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> perm, IntsAttribute(spec, "perm", reversed));
  if (!IsPermutation(perm, rank)) {
    return NodeError(
        spec, absl::StrCat("attribute 'perm' must be a permutation of [0, ", rank, ") for data ",
                           TensorTypeToString(data), ", received ", FormatInts(perm)));
  }
  return perm;
}

absl::Status InferTranspose(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ParseTransposePerm(*spec));
  const TensorType& data = *spec->inputs[0];
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = data.shape[perm[i]];
  spec->outputs = {TensorType{data.dtype, std::move(out)}};
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseConcatAxis(const KernelSpec& spec) {
  const int count = static_cast<int>(spec.inputs.size());
  if (count == 0) return NodeError(spec, "expected at least 1 input, received 0");
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, count, count));
  REPLICAD_ASSIGN_OR_RETURN(TensorType first, RequiredInput(spec, 0, "inputs"));
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  if (rank == 0) {
    return NodeError(
        spec, absl::StrCat("input 0 must have rank >= 1, received ", TensorTypeToString(first)));
  }
  if (!spec.attributes->Has("axis")) return NodeError(spec, "attribute 'axis' is required");
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", 0));
  REPLICAD_ASSIGN_OR_RETURN(axis, NormalizeAxis(spec, "axis", axis, rank));
  for (int i = 1; i < count; ++i) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(spec, i, "inputs"));
    bool matches = input.dtype == first.dtype && input.shape.size() == first.shape.size();
    for (int64_t d = 0; matches && d < rank; ++d) {
      matches = d == axis || input.shape[d] == first.shape[d];
    }
    if (!matches) {
      Shape expected = first.shape;
      expected[axis] = kAnyDim;
      return NodeError(
          spec, absl::StrCat("input ", i, " must be ", DTypeName(first.dtype),
                             ShapeToString(expected), " like input 0 (any size in axis ", axis,
                             "), received ", TensorTypeToString(input)));
    }
  }
  return axis;
}

absl::StatusOr<ConcatLayout> ParseConcatLayout(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, ParseConcatAxis(spec));
  const Shape& out = spec.outputs[0].shape;
  ConcatLayout layout;
  for (int64_t d = 0; d < axis; ++d) layout.outer *= out[d];
  int64_t inner = 1;
  for (size_t d = axis + 1; d < out.size(); ++d) inner *= out[d];
  for (const std::optional<TensorType>& input : spec.inputs) {
    layout.block_bytes.push_back(static_cast<size_t>(input->shape[axis] * inner) *
                                 DTypeSize(input->dtype));
  }
  return layout;
}

std::vector<size_t> ConcatLayout::JoinedOffsets() const {
  if (outer != 1) return {};
  std::vector<size_t> offsets;
  size_t offset = 0;
  for (size_t bytes : block_bytes) {
    offsets.push_back(offset);
    offset += bytes;
  }
  return offsets;
}

absl::Status InferConcat(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, ParseConcatAxis(*spec));
  TensorType out = *spec->inputs[0];
  out.shape[axis] = 0;
  for (const std::optional<TensorType>& input : spec->inputs) out.shape[axis] += input->shape[axis];
  spec->outputs = {std::move(out)};
  return absl::OkStatus();
}

absl::Status InferSqueeze(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, ReadAxes(*spec));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(*spec, 0, "data"));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  std::vector<bool> drop(rank, false);
  if (axes.has_value()) {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> normalized,
                              NormalizeAxes(*spec, *axes, rank, AxesName(*spec)));
    for (int64_t axis : normalized) {
      if (data.shape[axis] != 1) {
        return NodeError(
            *spec, absl::StrCat(AxesName(*spec), " ", FormatInts(*axes),
                                " must name dims of size 1 of data ", TensorTypeToString(data),
                                "; dim ", axis, " is ", data.shape[axis]));
      }
      drop[axis] = true;
    }
  } else {
    for (int64_t d = 0; d < rank; ++d) drop[d] = data.shape[d] == 1;
  }
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!drop[d]) out.push_back(data.shape[d]);
  }
  spec->outputs = {TensorType{data.dtype, std::move(out)}};
  return absl::OkStatus();
}

absl::Status InferUnsqueeze(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, ReadAxes(*spec));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(*spec, 0, "data"));
  if (!axes.has_value()) {
    return NodeError(*spec, absl::StrCat(AxesName(*spec), " is required"));
  }
  const int64_t out_rank = static_cast<int64_t>(data.shape.size() + axes->size());
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> normalized,
                            NormalizeAxes(*spec, *axes, out_rank, AxesName(*spec)));
  Shape out(out_rank, 1);
  std::vector<bool> inserted(out_rank, false);
  for (int64_t axis : normalized) inserted[axis] = true;
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (!inserted[d]) out[d] = data.shape[next++];
  }
  spec->outputs = {TensorType{data.dtype, std::move(out)}};
  return absl::OkStatus();
}

absl::Status InferExpand(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(*spec, 0, "input"));
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> shape, Int64ValueInput(*spec, 1, "shape"));
  for (int64_t dim : shape) {
    if (dim < 0) {
      return NodeError(*spec, absl::StrCat("input 1 'shape' must hold non-negative dims, "
                                           "received ",
                                           FormatInts(shape)));
    }
  }
  const std::optional<Shape> out = BroadcastShapes(input.shape, shape);
  if (!out.has_value()) {
    return NodeError(*spec,
                     absl::StrCat("input 0 'input' ", TensorTypeToString(input),
                                  " does not broadcast with input 1 'shape' ", FormatInts(shape)));
  }
  spec->outputs = {TensorType{input.dtype, *out}};
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseGatherAxis(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType indices, RequiredInput(spec, 1, "indices"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "indices", indices, {DType::kInt64}));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  if (rank == 0) {
    return NodeError(spec, absl::StrCat("input 0 'data' must have rank >= 1, received ",
                                        TensorTypeToString(data)));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", 0));
  return NormalizeAxis(spec, "axis", axis, rank);
}

absl::StatusOr<GatherLayout> ParseGatherLayout(const KernelSpec& spec) {
  GatherLayout layout;
  REPLICAD_ASSIGN_OR_RETURN(layout.axis, ParseGatherAxis(spec));
  const Shape& data = spec.inputs[0]->shape;
  for (int64_t d = 0; d < layout.axis; ++d) layout.outer *= data[d];
  layout.axis_dim = data[layout.axis];
  for (size_t d = layout.axis + 1; d < data.size(); ++d) layout.inner *= data[d];
  layout.num_indices = NumElements(spec.inputs[1]->shape);
  return layout;
}

absl::Status CheckGatherIndices(absl::string_view node, const int64_t* indices, int64_t count,
                                int64_t axis_dim) {
  for (int64_t j = 0; j < count; ++j) {
    if (indices[j] < -axis_dim || indices[j] >= axis_dim) {
      return absl::InvalidArgumentError(absl::StrCat(node, ": input 1 'indices' holds ", indices[j],
                                                     " at position ", j, "; expected an index in [",
                                                     -axis_dim, ", ", axis_dim - 1, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status InferGather(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, ParseGatherAxis(*spec));
  const TensorType& data = *spec->inputs[0];
  const Shape& indices = spec->inputs[1]->shape;
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  if (data.shape[axis] == 0 && NumElements(indices) != 0) {
    return NodeError(*spec, absl::StrCat("input 0 'data' ", TensorTypeToString(data),
                                         " has no elements along axis ", axis,
                                         ", so no index of input 1 'indices' is valid"));
  }
  spec->outputs = {TensorType{data.dtype, std::move(out)}};
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ShapeValue(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  // start and end arrived in opset 15; earlier opsets take every dim.
  int64_t start = 0;
  int64_t end = rank;
  if (spec.opset >= 15) {
    REPLICAD_ASSIGN_OR_RETURN(start, IntAttribute(spec, "start", 0));
    REPLICAD_ASSIGN_OR_RETURN(end, IntAttribute(spec, "end", rank));
  }
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  const int64_t count = std::max<int64_t>(0, end - start);
  Tensor value = Tensor::Host(DType::kInt64, {count});
  std::copy(data.shape.begin() + start, data.shape.begin() + start + count, value.data<int64_t>());
  return value;
}

absl::Status InferShape(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, ShapeValue(*spec));
  spec->outputs = {value.type()};
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ConstantOfShapeFill(const KernelSpec& spec) {
  if (!spec.attributes->Has("value")) return Tensor::Host(DType::kFloat32, {1});
  absl::StatusOr<Tensor> value = spec.attributes->GetTensor("value");
  if (!value.ok()) return NodeError(spec, value.status().message());
  if (value->num_elements() != 1) {
    return NodeError(spec, absl::StrCat("attribute 'value' must hold one element, received ",
                                        TensorTypeToString(value->type())));
  }
  if (value->location().kind != MemoryKind::kHost) {
    return NodeUnimplemented(
        spec, absl::StrCat("attribute 'value' lives in ", MemoryLocationToString(value->location()),
                           "; expected host memory"));
  }
  return *value;
}

absl::Status InferConstantOfShape(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> shape, Int64ValueInput(*spec, 0, "input"));
  for (int64_t dim : shape) {
    if (dim < 0) {
      return NodeError(*spec, absl::StrCat("input 0 'input' must hold non-negative dims, "
                                           "received ",
                                           FormatInts(shape)));
    }
  }
  REPLICAD_ASSIGN_OR_RETURN(Tensor fill, ConstantOfShapeFill(*spec));
  spec->outputs = {TensorType{fill.dtype(), std::move(shape)}};
  return absl::OkStatus();
}

absl::StatusOr<DType> ParseCastTarget(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_RETURN_IF_ERROR(RequiredInput(spec, 0, "input").status());
  if (!spec.attributes->Has("to")) return NodeError(spec, "attribute 'to' is required");
  REPLICAD_ASSIGN_OR_RETURN(int64_t to, IntAttribute(spec, "to", 0));
  // TensorProto.DataType: 1 (FLOAT) to 16 (BFLOAT16) up to opset 18; 0 is UNDEFINED.
  constexpr int64_t kLastOnnxType = 16;
  if (to < 1 || to > kLastOnnxType) {
    return NodeError(spec, absl::StrCat("attribute 'to' must be an ONNX TensorProto.DataType "
                                        "from 1 to ",
                                        kLastOnnxType, ", received ", to));
  }
  absl::StatusOr<DType> dtype = DTypeFromOnnx(static_cast<int>(to));
  if (!dtype.ok()) {
    return NodeUnimplemented(
        spec,
        absl::StrCat(
            "attribute 'to' is ", OnnxDataTypeName(static_cast<int>(to)), " (", to,
            "); replicad casts to FLOAT, FLOAT16, BFLOAT16, UINT8, INT8, INT32, INT64 and BOOL"));
  }
  return *dtype;
}

absl::Status InferCast(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(DType to, ParseCastTarget(*spec));
  spec->outputs = {TensorType{to, spec->inputs[0]->shape}};
  return absl::OkStatus();
}

}  // namespace replicad
