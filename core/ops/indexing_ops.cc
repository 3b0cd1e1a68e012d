// GatherElements, ScatterElements, GatherND and OneHot (indexing_attributes.h).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/indexing_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"
#include "core/ops/value_input.h"

namespace replicad {

absl::Status CheckIndexTuples(absl::string_view node, const int64_t* indices, int64_t count,
                              const std::vector<int64_t>& dims) {
  const int64_t tuple = static_cast<int64_t>(dims.size());
  for (int64_t n = 0; n < count; ++n) {
    for (int64_t d = 0; d < tuple; ++d) {
      const int64_t index = indices[n * tuple + d];
      if (index < -dims[d] || index >= dims[d]) {
        return absl::InvalidArgumentError(
            absl::StrCat(node, ": input 1 'indices' holds ", index, " at position ", n * tuple + d,
                         "; expected an index in [", -dims[d], ", ", dims[d] - 1, "]"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

template <typename Index>
absl::Status CheckIndicesAlongAxis(absl::string_view node, const Index* indices, int64_t count,
                                   int64_t axis_dim) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = static_cast<int64_t>(indices[i]);
    if (index < -axis_dim || index >= axis_dim) {
      return absl::InvalidArgumentError(absl::StrCat(node, ": input 1 'indices' holds ", index,
                                                     " at position ", i, "; expected an index in [",
                                                     -axis_dim, ", ", axis_dim - 1, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckElementIndices(absl::string_view node, const int32_t* indices, int64_t count,
                                 int64_t axis_dim) {
  return CheckIndicesAlongAxis(node, indices, count, axis_dim);
}

absl::Status CheckElementIndices(absl::string_view node, const int64_t* indices, int64_t count,
                                 int64_t axis_dim) {
  return CheckIndicesAlongAxis(node, indices, count, axis_dim);
}

absl::StatusOr<GatherElementsLayout> ParseGatherElements(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType indices, RequiredInput(spec, 1, "indices"));
  REPLICAD_RETURN_IF_ERROR(
      CheckInputDType(spec, 1, "indices", indices, {DType::kInt32, DType::kInt64}));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  GatherElementsLayout layout;
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", 0));
  if (rank == 0) {
    return NodeError(spec, absl::StrCat("input 0 'data' must have rank >= 1, received ",
                                        TensorTypeToString(data)));
  }
  REPLICAD_ASSIGN_OR_RETURN(layout.axis, NormalizeAxis(spec, "axis", axis, rank));
  bool fits = indices.shape.size() == data.shape.size();
  for (int64_t d = 0; fits && d < rank; ++d) {
    fits = d == layout.axis || indices.shape[d] <= data.shape[d];
  }
  if (!fits) {
    return NodeError(spec, absl::StrCat("input 1 'indices' must have data's rank and no dim "
                                        "larger than data's outside axis ",
                                        layout.axis, "; data is ", TensorTypeToString(data),
                                        ", received ", TensorTypeToString(indices)));
  }
  if (data.shape[layout.axis] == 0 && NumElements(indices.shape) > 0) {
    return NodeError(spec, absl::StrCat("input 0 'data' has no elements along axis ", layout.axis,
                                        " to gather; received ", TensorTypeToString(data)));
  }
  layout.data = data.shape;
  layout.indices = indices.shape;
  return layout;
}

absl::Status InferGatherElements(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseGatherElements(*spec).status());
  spec->outputs = {TensorType{spec->inputs[0]->dtype, spec->inputs[1]->shape}};
  return absl::OkStatus();
}

absl::StatusOr<ScatterElementsLayout> ParseScatterElements(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 3, 3));
  ScatterElementsLayout layout;
  REPLICAD_ASSIGN_OR_RETURN(layout.elements, ParseGatherElements(ForwardInputs(spec, 2)));
  REPLICAD_ASSIGN_OR_RETURN(TensorType updates, RequiredInput(spec, 2, "updates"));
  const TensorType expected{spec.inputs[0]->dtype, layout.elements.indices};
  if (!(updates == expected)) {
    return NodeError(spec, absl::StrCat("input 2 'updates' must be ", TensorTypeToString(expected),
                                        " (data's dtype, indices' shape), received ",
                                        TensorTypeToString(updates)));
  }
  REPLICAD_ASSIGN_OR_RETURN(layout.reduction, ParseScatterReduction(spec));
  return layout;
}

absl::Status InferScatterElements(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseScatterElements(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::StatusOr<GatherNdLayout> ParseGatherNd(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType indices, RequiredInput(spec, 1, "indices"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "indices", indices, {DType::kInt64}));
  REPLICAD_ASSIGN_OR_RETURN(int64_t b, IntAttribute(spec, "batch_dims", 0));
  const int64_t r = static_cast<int64_t>(data.shape.size());
  const int64_t q = static_cast<int64_t>(indices.shape.size());
  if (b < 0 || b >= std::min(r, q)) {
    return NodeError(spec, absl::StrCat("attribute 'batch_dims' must be in [0, ", std::min(r, q),
                                        ") for data ", TensorTypeToString(data), " and indices ",
                                        TensorTypeToString(indices), ", received ", b));
  }
  const int64_t k = indices.shape.back();
  bool valid = k >= 1 && k <= r - b;
  for (int64_t d = 0; valid && d < b; ++d) valid = indices.shape[d] == data.shape[d];
  if (!valid) {
    return NodeError(spec, absl::StrCat("input 1 'indices' must share data's first ", b,
                                        " (batch_dims) dims and end in a tuple size in [1, ", r - b,
                                        "]; data is ", TensorTypeToString(data), ", received ",
                                        TensorTypeToString(indices)));
  }
  GatherNdLayout layout;
  layout.tuple = k;
  for (int64_t d = 0; d < b; ++d) layout.batches *= data.shape[d];
  for (int64_t d = b; d + 1 < q; ++d) layout.count_per_batch *= indices.shape[d];
  for (int64_t d = b + k; d < r; ++d) layout.slice *= data.shape[d];
  int64_t stride = layout.slice;
  layout.tuple_dims.assign(data.shape.begin() + b, data.shape.begin() + b + k);
  layout.tuple_strides.resize(k);
  for (int64_t d = k - 1; d >= 0; --d) {
    layout.tuple_strides[d] = stride;
    stride *= layout.tuple_dims[d];
  }
  layout.batch_stride = stride;
  return layout;
}

absl::Status InferGatherNd(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseGatherNd(*spec).status());
  const Shape& data = spec->inputs[0]->shape;
  const Shape& indices = spec->inputs[1]->shape;
  REPLICAD_ASSIGN_OR_RETURN(int64_t b, IntAttribute(*spec, "batch_dims", 0));
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + b + indices.back(), data.end());
  spec->outputs = {TensorType{spec->inputs[0]->dtype, out}};
  return absl::OkStatus();
}

absl::StatusOr<OneHotLayout> ParseOneHot(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 3, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType indices, RequiredInput(spec, 0, "indices"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "indices", indices, kNumericDTypes));
  REPLICAD_ASSIGN_OR_RETURN(TensorType depth_type, RequiredInput(spec, 1, "depth"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "depth", depth_type, kNumericDTypes));
  REPLICAD_ASSIGN_OR_RETURN(TensorType values, RequiredInput(spec, 2, "values"));
  if (NumElements(depth_type.shape) != 1 || depth_type.shape.size() > 1) {
    return NodeError(spec, absl::StrCat("input 1 'depth' must be one number, received ",
                                        TensorTypeToString(depth_type)));
  }
  if (values.shape != Shape{2}) {
    return NodeError(spec, absl::StrCat("input 2 'values' must be [off_value, on_value], "
                                        "received ",
                                        TensorTypeToString(values)));
  }
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* depth_value, ValueInput(spec, 1, "depth"));
  const double depth = VisitDType(depth_type.dtype, [&](auto traits) {
    using T = typename decltype(traits)::Type;
    return static_cast<double>(depth_value->data<T>()[0]);
  });
  // ONNX truncates a float depth; more than 2^31 positions per index is no
  // one-hot encoding anyone means.
  if (!(depth >= 1.0) || depth > 2147483648.0) {
    return NodeError(spec, absl::StrCat("input 1 'depth' must be in [1, 2^31], received ", depth));
  }
  OneHotLayout layout;
  layout.depth = static_cast<int64_t>(std::trunc(depth));
  const int64_t out_rank = static_cast<int64_t>(indices.shape.size()) + 1;
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", -1));
  REPLICAD_ASSIGN_OR_RETURN(axis, NormalizeAxis(spec, "axis", axis, out_rank));
  for (int64_t d = 0; d < axis; ++d) layout.outer *= indices.shape[d];
  for (int64_t d = axis; d + 1 < out_rank; ++d) layout.inner *= indices.shape[d];
  return layout;
}

absl::Status InferOneHot(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(OneHotLayout layout, ParseOneHot(*spec));
  const Shape& indices = spec->inputs[0]->shape;
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(*spec, "axis", -1));
  if (axis < 0) axis += static_cast<int64_t>(indices.size()) + 1;
  Shape out = indices;
  out.insert(out.begin() + axis, layout.depth);
  spec->outputs = {TensorType{spec->inputs[2]->dtype, out}};
  return absl::OkStatus();
}

}  // namespace replicad
