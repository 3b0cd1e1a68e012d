#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"
#include "core/ops/slice_pad_attributes.h"
#include "core/ops/value_input.h"

namespace replicad {
namespace {

// The optional axes input at `index`: [0, rank) when absent.
absl::StatusOr<std::vector<int64_t>> OptionalAxes(const KernelSpec& spec, int index, int64_t rank) {
  if (!HasInput(spec, index)) {
    std::vector<int64_t> all(rank);
    for (int64_t d = 0; d < rank; ++d) all[d] = d;
    return all;
  }
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, Int64ValueInput(spec, index, "axes"));
  return NormalizeAxes(spec, axes, rank, absl::StrCat("input ", index, " 'axes'"));
}

// The remainder in [0, modulus); C++'s % keeps the sign of `value`, and
// indices left of a dim are negative.
int64_t PositiveModulo(int64_t value, int64_t modulus) {
  const int64_t r = value % modulus;
  return r < 0 ? r + modulus : r;
}

}  // namespace

absl::StatusOr<SliceLayout> ParseSliceLayout(const KernelSpec& spec) {
  if (spec.opset < 10) {
    return NodeUnimplemented(spec,
                             "Slice before opset 10 (starts and ends as attributes) is not "
                             "supported; convert the model to opset 11 or later");
  }
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 3, 5));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> starts, Int64ValueInput(spec, 1, "starts"));
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> ends, Int64ValueInput(spec, 2, "ends"));
  if (ends.size() != starts.size()) {
    return NodeError(spec, absl::StrCat("input 2 'ends' must have as many elements as input 1 "
                                        "'starts' (",
                                        starts.size(), "), received ", FormatInts(ends)));
  }
  std::vector<int64_t> axes;
  if (HasInput(spec, 3)) {
    REPLICAD_ASSIGN_OR_RETURN(axes, Int64ValueInput(spec, 3, "axes"));
    if (axes.size() != starts.size()) {
      return NodeError(spec, absl::StrCat("input 3 'axes' must have as many elements as input 1 "
                                          "'starts' (",
                                          starts.size(), "), received ", FormatInts(axes)));
    }
    REPLICAD_ASSIGN_OR_RETURN(axes, NormalizeAxes(spec, axes, rank, "input 3 'axes'"));
  } else {
    if (static_cast<int64_t>(starts.size()) > rank) {
      return NodeError(spec, absl::StrCat("input 1 'starts' ", FormatInts(starts),
                                          " has more elements than data ", TensorTypeToString(data),
                                          " has dims"));
    }
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> steps(starts.size(), 1);
  if (HasInput(spec, 4)) {
    REPLICAD_ASSIGN_OR_RETURN(steps, Int64ValueInput(spec, 4, "steps"));
    if (steps.size() != starts.size()) {
      return NodeError(spec, absl::StrCat("input 4 'steps' must have as many elements as input 1 "
                                          "'starts' (",
                                          starts.size(), "), received ", FormatInts(steps)));
    }
    if (std::find(steps.begin(), steps.end(), 0) != steps.end()) {
      return NodeError(
          spec, absl::StrCat("input 4 'steps' must be non-zero, received ", FormatInts(steps)));
    }
  }

  SliceLayout layout;
  layout.starts.assign(rank, 0);
  layout.steps.assign(rank, 1);
  layout.output = data.shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t axis = axes[i];
    const int64_t dim = data.shape[axis];
    const int64_t step = steps[i];
    // Negative bounds count from the back; then ONNX clamps to [0, dim] when
    // walking forwards and to [-1, dim - 1] when walking backwards.
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    int64_t count = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      if (end > start) count = (end - start + step - 1) / step;
    } else if (dim > 0) {  // For dim 0 the bounds [0, dim - 1] would be inverted.
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      if (start > end) count = (start - end + (-step) - 1) / (-step);
    }
    layout.starts[axis] = count > 0 ? start : 0;
    layout.steps[axis] = step;
    layout.output[axis] = count;
  }
  return layout;
}

absl::Status InferSlice(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(SliceLayout layout, ParseSliceLayout(*spec));
  spec->outputs = {TensorType{spec->inputs[0]->dtype, std::move(layout.output)}};
  return absl::OkStatus();
}

int64_t PadSourceIndex(PadMode mode, int64_t out, int64_t begin, int64_t end, int64_t dim) {
  const int64_t cropped_begin = std::max<int64_t>(-begin, 0);
  const int64_t size = dim - cropped_begin - std::max<int64_t>(-end, 0);
  const int64_t c = out - std::max<int64_t>(begin, 0);  // Index into the cropped data.
  if (c >= 0 && c < size) return cropped_begin + c;
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return cropped_begin + std::clamp<int64_t>(c, 0, size - 1);
    case PadMode::kReflect: {
      if (size == 1) return cropped_begin;
      // Mirroring about both borders repeats with period 2 * (size - 1).
      const int64_t period = 2 * (size - 1);
      const int64_t r = PositiveModulo(c, period);
      return cropped_begin + (r < size ? r : period - r);
    }
  }
  return -1;
}

absl::StatusOr<PadLayout> ParsePadLayout(const KernelSpec& spec) {
  if (spec.opset < 11) {
    return NodeUnimplemented(spec,
                             "Pad before opset 11 (pads as an attribute) is not supported; "
                             "convert the model to opset 11 or later");
  }
  // axes (input 3) arrived in opset 18.
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, spec.opset >= 18 ? 4 : 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "data", data, kNumericOrBoolDTypes));
  const int64_t rank = static_cast<int64_t>(data.shape.size());

  PadLayout layout;
  REPLICAD_ASSIGN_OR_RETURN(std::string mode, StringAttribute(spec, "mode", "constant"));
  if (mode == "constant") {
    layout.mode = PadMode::kConstant;
  } else if (mode == "reflect") {
    layout.mode = PadMode::kReflect;
  } else if (mode == "edge") {
    layout.mode = PadMode::kEdge;
  } else if (mode == "wrap" && spec.opset >= 19) {
    return NodeUnimplemented(spec, "attribute 'mode' is 'wrap', which replicad does not compute");
  } else {
    return NodeError(spec, absl::StrCat("attribute 'mode' must be constant, reflect or edge, "
                                        "received '",
                                        mode, "'"));
  }

  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, OptionalAxes(spec, 3, rank));
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> pads, Int64ValueInput(spec, 1, "pads"));
  if (pads.size() != 2 * axes.size()) {
    return NodeError(spec, absl::StrCat("input 1 'pads' must hold ", 2 * axes.size(),
                                        " values (begin and end for each of ", axes.size(),
                                        " axes), received ", FormatInts(pads)));
  }
  layout.pads_begin.assign(rank, 0);
  layout.pads_end.assign(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    layout.pads_begin[axes[i]] = pads[i];
    layout.pads_end[axes[i]] = pads[i + axes.size()];
  }

  layout.value = Tensor::Host(data.dtype, {});
  if (HasInput(spec, 2)) {
    REPLICAD_ASSIGN_OR_RETURN(const Tensor* value, ValueInput(spec, 2, "constant_value"));
    if (value->dtype() != data.dtype || value->num_elements() != 1 || value->rank() > 1) {
      return NodeError(
          spec, absl::StrCat("input 2 'constant_value' must be one ", DTypeName(data.dtype),
                             " element like data, received ", TensorTypeToString(value->type())));
    }
    std::memcpy(layout.value.raw_data(), value->raw_data(), DTypeSize(data.dtype));
  }

  layout.output = data.shape;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t begin = layout.pads_begin[d];
    const int64_t end = layout.pads_end[d];
    const int64_t dim = data.shape[d];
    const int64_t cropped = dim + std::min<int64_t>(begin, 0) + std::min<int64_t>(end, 0);
    if (cropped < 0) {
      return NodeError(spec, absl::StrCat("input 1 'pads' ", FormatInts(pads), " crops ",
                                          -std::min<int64_t>(begin, 0) - std::min<int64_t>(end, 0),
                                          " elements from dim ", d, " of data ",
                                          TensorTypeToString(data), ", which has ", dim));
    }
    if (layout.mode != PadMode::kConstant && cropped == 0 && (begin > 0 || end > 0)) {
      return NodeError(spec, absl::StrCat("mode '", mode, "' cannot extend dim ", d, " of data ",
                                          TensorTypeToString(data),
                                          ", which is empty after cropping by input 1 'pads' ",
                                          FormatInts(pads)));
    }
    layout.output[d] = dim + begin + end;
  }
  return layout;
}

absl::Status InferPad(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(PadLayout layout, ParsePadLayout(*spec));
  spec->outputs = {TensorType{spec->inputs[0]->dtype, std::move(layout.output)}};
  return absl::OkStatus();
}

}  // namespace replicad
