// Range, Trilu, Split and ScatterND (sequence_attributes.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/sequence_attributes.h"
#include "core/ops/shape_rules.h"
#include "core/ops/value_input.h"

namespace replicad {
namespace {

// The shape rule makes the range itself (its length is its value), so a bound
// on it is a bound on what a model, or a request whose values set the limit
// (a plan's data-dependent part), can make this allocate: 2^28 elements, 2 GiB
// of int64.
constexpr int64_t kMaxRangeElements = int64_t{1} << 28;

template <typename T>
absl::StatusOr<Tensor> RangeOf(const KernelSpec& spec, T start, T limit, T delta) {
  if (delta == T(0)) return NodeError(spec, "input 2 'delta' must not be 0");
  double count = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                           static_cast<double>(delta));
  if (std::isnan(count)) {
    return NodeError(spec, "inputs 'start', 'limit' and 'delta' must be finite");
  }
  count = std::max(count, 0.0);
  if (count > static_cast<double>(kMaxRangeElements)) {
    return NodeError(spec, absl::StrCat("the range holds ", count, " elements; at most ",
                                        kMaxRangeElements, " are made"));
  }
  const int64_t n = static_cast<int64_t>(count);
  Tensor value = Tensor::Host(spec.inputs[0]->dtype, {n});
  T* out = value.data<T>();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  return value;
}

}  // namespace

absl::StatusOr<Tensor> RangeValue(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 3, 3));
  const char* names[] = {"start", "limit", "delta"};
  const Tensor* values[3];
  for (int i = 0; i < 3; ++i) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, i, names[i]));
    REPLICAD_RETURN_IF_ERROR(
        CheckInputDType(spec, i, names[i], type, {DType::kFloat32, DType::kInt32, DType::kInt64}));
    if (type.dtype != spec.inputs[0]->dtype || !type.shape.empty()) {
      return NodeError(spec, absl::StrCat("input ", i, " '", names[i], "' must be a scalar of ",
                                          DTypeName(spec.inputs[0]->dtype), ", received ",
                                          TensorTypeToString(type)));
    }
    REPLICAD_ASSIGN_OR_RETURN(values[i], ValueInput(spec, i, names[i]));
  }
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> absl::StatusOr<Tensor> {
    using T = typename decltype(traits)::Type;
    return RangeOf<T>(spec, values[0]->data<T>()[0], values[1]->data<T>()[0],
                      values[2]->data<T>()[0]);
  });
}

absl::Status InferRange(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, RangeValue(*spec));
  spec->outputs = {value.type()};
  return absl::OkStatus();
}

absl::StatusOr<TriluLayout> ParseTrilu(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(spec, 0, "input"));
  const Shape& shape = input.shape;
  if (shape.size() < 2) {
    return NodeError(spec, absl::StrCat("input 0 'input' must have rank >= 2, received ",
                                        TensorTypeToString(input)));
  }
  TriluLayout layout;
  REPLICAD_ASSIGN_OR_RETURN(int64_t upper, IntAttribute(spec, "upper", 1));
  layout.upper = upper != 0;
  if (HasInput(spec, 1)) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType k, RequiredInput(spec, 1, "k"));
    if (k.dtype != DType::kInt64 || NumElements(k.shape) != 1 || k.shape.size() > 1) {
      return NodeError(spec, absl::StrCat("input 1 'k' must be an int64 scalar, received ",
                                          TensorTypeToString(k)));
    }
    REPLICAD_ASSIGN_OR_RETURN(const Tensor* value, ValueInput(spec, 1, "k"));
    layout.k = value->data<int64_t>()[0];
  }
  layout.rows = shape[shape.size() - 2];
  layout.cols = shape.back();
  layout.matrices = NumElements(Shape(shape.begin(), shape.end() - 2));
  return layout;
}

absl::Status InferTrilu(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseTrilu(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

absl::StatusOr<SplitLayout> ParseSplit(const KernelSpec& spec) {
  const bool sizes_are_input = spec.opset >= 13;
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, sizes_are_input ? 2 : 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(spec, 0, "input"));
  const int64_t rank = static_cast<int64_t>(input.shape.size());
  if (rank == 0) {
    return NodeError(spec, absl::StrCat("input 0 'input' must have rank >= 1, received ",
                                        TensorTypeToString(input)));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(spec, "axis", 0));
  SplitLayout layout;
  REPLICAD_ASSIGN_OR_RETURN(layout.axis, NormalizeAxis(spec, "axis", axis, rank));
  const int64_t axis_dim = input.shape[layout.axis];
  for (int64_t d = 0; d < layout.axis; ++d) layout.outer *= input.shape[d];
  for (int64_t d = layout.axis + 1; d < rank; ++d) layout.inner *= input.shape[d];
  if (sizes_are_input && HasInput(spec, 1)) {
    REPLICAD_ASSIGN_OR_RETURN(layout.sizes, Int64ValueInput(spec, 1, "split"));
  } else if (!sizes_are_input && spec.attributes->Has("split")) {
    REPLICAD_ASSIGN_OR_RETURN(layout.sizes, IntsAttribute(spec, "split", {}));
  } else {
    int64_t parts = spec.declared_outputs;
    const bool by_attribute = spec.opset >= 18 && spec.attributes->Has("num_outputs");
    if (by_attribute) {
      REPLICAD_ASSIGN_OR_RETURN(parts, IntAttribute(spec, "num_outputs", 0));
      if (parts < 1) {
        return NodeError(spec, absl::StrCat("attribute 'num_outputs' must be at least 1, "
                                            "received ",
                                            parts));
      }
    }
    if (parts < 1) {
      return NodeError(spec, "without 'split' the node must name its outputs, one per part");
    }
    // Opset 18's num_outputs allows a smaller last part; before, the parts
    // must be equal.
    const int64_t part = by_attribute ? (axis_dim + parts - 1) / parts : axis_dim / parts;
    if (!by_attribute && axis_dim % parts != 0) {
      return NodeError(spec, absl::StrCat("axis ", layout.axis, " of input 0 'input' ",
                                          TensorTypeToString(input), " does not split into ", parts,
                                          " equal parts"));
    }
    for (int64_t i = 0, left = axis_dim; i < parts; ++i, left -= part) {
      layout.sizes.push_back(std::max<int64_t>(std::min(part, left), 0));
    }
  }
  int64_t total = 0;
  for (int64_t size : layout.sizes) {
    if (size < 0) {
      return NodeError(spec, absl::StrCat("'split' [", absl::StrJoin(layout.sizes, ","),
                                          "] must hold sizes of 0 or more"));
    }
    total += size;
  }
  if (total != axis_dim || layout.sizes.empty()) {
    return NodeError(spec, absl::StrCat("'split' [", absl::StrJoin(layout.sizes, ","),
                                        "] must sum to axis ", layout.axis, "'s ", axis_dim,
                                        " of input 0 'input' ", TensorTypeToString(input)));
  }
  return layout;
}

absl::Status InferSplit(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(SplitLayout layout, ParseSplit(*spec));
  spec->outputs.clear();
  for (int64_t size : layout.sizes) {
    TensorType part = *spec->inputs[0];
    part.shape[layout.axis] = size;
    spec->outputs.push_back(part);
  }
  return absl::OkStatus();
}

absl::StatusOr<ScatterReduction> ParseScatterReduction(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::string reduction, StringAttribute(spec, "reduction", "none"));
  if (reduction == "none") return ScatterReduction::kNone;
  if (spec.inputs[0].has_value() && spec.inputs[0]->dtype == DType::kBool) {
    return NodeError(
        spec, absl::StrCat("attribute 'reduction' ", reduction, " needs numbers; data is bool"));
  }
  if (reduction == "add") return ScatterReduction::kAdd;
  if (reduction == "mul") return ScatterReduction::kMul;
  if (reduction == "max" && spec.opset >= 18) return ScatterReduction::kMax;
  if (reduction == "min" && spec.opset >= 18) return ScatterReduction::kMin;
  return NodeError(spec, absl::StrCat("attribute 'reduction' must be none, add or mul (max and "
                                      "min from opset 18), received '",
                                      reduction, "'"));
}

absl::StatusOr<ScatterNdLayout> ParseScatterNd(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 3, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType indices, RequiredInput(spec, 1, "indices"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType updates, RequiredInput(spec, 2, "updates"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "indices", indices, {DType::kInt64}));
  if (updates.dtype != data.dtype) {
    return NodeError(
        spec, absl::StrCat("input 2 'updates' must have data's dtype ", DTypeName(data.dtype),
                           ", received ", TensorTypeToString(updates)));
  }
  const int64_t r = static_cast<int64_t>(data.shape.size());
  const int64_t q = static_cast<int64_t>(indices.shape.size());
  if (r < 1 || q < 1 || indices.shape.back() > r) {
    return NodeError(spec, absl::StrCat("input 1 'indices' ", TensorTypeToString(indices),
                                        " must have rank >= 1 and a last dim of at most data's "
                                        "rank; data is ",
                                        TensorTypeToString(data)));
  }
  ScatterNdLayout layout;
  layout.tuple = indices.shape.back();
  Shape expected(indices.shape.begin(), indices.shape.end() - 1);
  expected.insert(expected.end(), data.shape.begin() + layout.tuple, data.shape.end());
  if (updates.shape != expected) {
    return NodeError(
        spec, absl::StrCat("input 2 'updates' must be ", ShapeToString(expected), " for indices ",
                           TensorTypeToString(indices), " into data ", TensorTypeToString(data),
                           ", received ", TensorTypeToString(updates)));
  }
  REPLICAD_ASSIGN_OR_RETURN(layout.reduction, ParseScatterReduction(spec));
  layout.count = NumElements(Shape(indices.shape.begin(), indices.shape.end() - 1));
  for (int64_t d = layout.tuple; d < r; ++d) layout.slice *= data.shape[d];
  layout.data_dims.assign(data.shape.begin(), data.shape.begin() + layout.tuple);
  layout.strides.resize(layout.tuple);
  int64_t stride = layout.slice;
  for (int64_t d = layout.tuple - 1; d >= 0; --d) {
    layout.strides[d] = stride;
    stride *= data.shape[d];
  }
  return layout;
}

absl::Status InferScatterND(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseScatterNd(*spec).status());
  spec->outputs = {*spec->inputs[0]};
  return absl::OkStatus();
}

}  // namespace replicad
