#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/fused_activation.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// ONNX rounds integer division of the output size towards negative infinity
// (floor mode) or positive infinity (ceil_mode); both operands are positive
// here except the numerator, which the caller checked is non-negative.
int64_t DivideRounding(int64_t numerator, int64_t denominator, bool round_up) {
  return round_up ? (numerator + denominator - 1) / denominator : numerator / denominator;
}

absl::StatusOr<std::vector<int64_t>> PositiveValues(const KernelSpec& spec, const std::string& name,
                                                    size_t count) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> values,
                            IntsAttribute(spec, name, std::vector<int64_t>(count, 1)));
  if (values.size() != count || *std::min_element(values.begin(), values.end()) < 1) {
    return NodeError(
        spec, absl::StrCat("attribute '", name, "' must hold ", count, " positive values for a ",
                           count, "-D window, received [", absl::StrJoin(values, ","), "]"));
  }
  return values;
}

}  // namespace

// "[h_begin, w_begin, h_end, w_end]" for 2 spatial dims, with d first for 3.
std::string PadsLayout(size_t count) {
  const std::vector<std::string> dims =
      count == 3 ? std::vector<std::string>{"d", "h", "w"} : std::vector<std::string>{"h", "w"};
  std::vector<std::string> names;
  for (const char* end : {"_begin", "_end"}) {
    for (const std::string& d : dims) names.push_back(d + end);
  }
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

absl::StatusOr<WindowNd> ResolveWindowNd(const KernelSpec& spec, const std::vector<int64_t>& input,
                                         const std::vector<int64_t>& kernel, bool ceil_mode) {
  const size_t n = input.size();
  WindowNd window;
  window.kernel = kernel;
  REPLICAD_ASSIGN_OR_RETURN(window.strides, PositiveValues(spec, "strides", n));
  REPLICAD_ASSIGN_OR_RETURN(window.dilations, PositiveValues(spec, "dilations", n));
  REPLICAD_ASSIGN_OR_RETURN(std::string auto_pad, StringAttribute(spec, "auto_pad", "NOTSET"));
  const bool has_pads = spec.attributes->Has("pads");
  window.pads_begin.assign(n, 0);
  window.pads_end.assign(n, 0);
  window.output.assign(n, 0);
  std::vector<int64_t> dilated(n);
  for (size_t i = 0; i < n; ++i) dilated[i] = (kernel[i] - 1) * window.dilations[i] + 1;

  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (has_pads) {
      return NodeError(spec, absl::StrCat("attribute 'pads' cannot be combined with auto_pad ",
                                          auto_pad, "; expected one of them"));
    }
    for (size_t i = 0; i < n; ++i) {
      window.output[i] = DivideRounding(input[i], window.strides[i], /*round_up=*/true);
      const int64_t total =
          std::max<int64_t>(0, (window.output[i] - 1) * window.strides[i] + dilated[i] - input[i]);
      // SAME_UPPER puts the odd padding element at the end, SAME_LOWER at the start.
      window.pads_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      window.pads_end[i] = total - window.pads_begin[i];
    }
    return window;
  }
  if (auto_pad == "VALID") {
    if (has_pads) {
      return NodeError(spec, "attribute 'pads' cannot be combined with auto_pad VALID");
    }
  } else if (auto_pad == "NOTSET") {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                              IntsAttribute(spec, "pads", std::vector<int64_t>(2 * n, 0)));
    if (pads.size() != 2 * n || *std::min_element(pads.begin(), pads.end()) < 0) {
      return NodeError(spec,
                       absl::StrCat("attribute 'pads' must hold ", 2 * n, " non-negative values ",
                                    PadsLayout(n), ", received [", absl::StrJoin(pads, ","), "]"));
    }
    window.pads_begin.assign(pads.begin(), pads.begin() + n);
    window.pads_end.assign(pads.begin() + n, pads.end());
  } else {
    return NodeError(spec, absl::StrCat("attribute 'auto_pad' must be NOTSET, VALID, SAME_UPPER "
                                        "or SAME_LOWER, received '",
                                        auto_pad, "'"));
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = input[i] + window.pads_begin[i] + window.pads_end[i] - dilated[i];
    if (span < 0) {
      return NodeError(spec, absl::StrCat("spatial dim ", i, " of size ", input[i], " with pads ",
                                          window.pads_begin[i], "+", window.pads_end[i],
                                          " is smaller than the dilated "
                                          "kernel ",
                                          dilated[i]));
    }
    window.output[i] = DivideRounding(span, window.strides[i], ceil_mode) + 1;
  }
  return window;
}

absl::StatusOr<Window2d> ResolveWindow2d(const KernelSpec& spec, std::array<int64_t, 2> input,
                                         std::array<int64_t, 2> kernel, bool ceil_mode) {
  REPLICAD_ASSIGN_OR_RETURN(
      WindowNd nd, ResolveWindowNd(spec, {input[0], input[1]}, {kernel[0], kernel[1]}, ceil_mode));
  Window2d window;
  for (int i = 0; i < 2; ++i) {
    window.kernel[i] = nd.kernel[i];
    window.strides[i] = nd.strides[i];
    window.dilations[i] = nd.dilations[i];
    window.pads_begin[i] = nd.pads_begin[i];
    window.pads_end[i] = nd.pads_end[i];
    window.output[i] = nd.output[i];
  }
  return window;
}

absl::Status CheckSpatial2d(const KernelSpec& spec, const TensorType& x, absl::string_view what) {
  if (x.shape.size() < 3) {
    return NodeError(spec, absl::StrCat("input 0 'X' must be [N, C, spatial...], received ",
                                        TensorTypeToString(x)));
  }
  if (x.shape.size() != 4) {
    // Rank 5 reaches here only where 3-D is not computed (CUDA slots,
    // training); CPU slots' inference takes it before.
    return NodeUnimplemented(
        spec, absl::StrCat("only 2-D ", what, " (X of rank 4) is implemented here",
                           x.shape.size() == 5 ? " (3-D runs on CPU slots, for inference)" : "",
                           ", received X ", TensorTypeToString(x)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Conv2dInputs> ParseConv2dInputs(const KernelSpec& spec, int max_inputs,
                                               absl::string_view what) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, max_inputs));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType w, RequiredInput(spec, 1, "W"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, {DType::kFloat32}));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "W", w, {DType::kFloat32}));
  REPLICAD_RETURN_IF_ERROR(CheckSpatial2d(spec, x, what));
  if (w.shape.size() != x.shape.size()) {
    return NodeError(spec, absl::StrCat("input 1 'W' must have rank ", x.shape.size(),
                                        " like X, received ", TensorTypeToString(w)));
  }
  return Conv2dInputs{std::move(x), std::move(w)};
}

namespace {

// What every Conv is checked for whatever its spatial rank: group against X's
// and W's (input `w_index`) channels, kernel_shape against W's spatial dims.
absl::Status CheckConvOperands(const KernelSpec& spec, const TensorType& x, const TensorType& w,
                               int w_index, int64_t* group, int64_t* out_channels) {
  REPLICAD_ASSIGN_OR_RETURN(*group, IntAttribute(spec, "group", 1));
  const int64_t channels = x.shape[1];
  *out_channels = w.shape[0];
  if (*group < 1 || channels % *group != 0 || *out_channels % *group != 0) {
    return NodeError(spec, absl::StrCat("attribute 'group' must be positive and divide X's ",
                                        channels, " channels and W's ", *out_channels,
                                        " output channels, received ", *group));
  }
  if (w.shape[1] != channels / *group) {
    return NodeError(spec, absl::StrCat("input ", w_index, " 'W' must have ", channels / *group,
                                        " input channels (X's ", channels, " / group ", *group,
                                        ") in dim 1, received ", TensorTypeToString(w)));
  }
  const std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel_shape,
                            IntsAttribute(spec, "kernel_shape", kernel));
  if (kernel_shape != kernel) {
    return NodeError(spec, absl::StrCat("attribute 'kernel_shape' must match W's spatial dims [",
                                        absl::StrJoin(kernel, ","), "], received [",
                                        absl::StrJoin(kernel_shape, ","), "]"));
  }
  return absl::OkStatus();
}

// Conv's optional B [M], float32.
absl::Status CheckConvBias(const KernelSpec& spec, int64_t out_channels) {
  if (!HasInput(spec, 2)) return absl::OkStatus();
  const TensorType& b = *spec.inputs[2];
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 2, "B", b, {DType::kFloat32}));
  if (b.shape != Shape{out_channels}) {
    return NodeError(spec, absl::StrCat("input 2 'B' must be float32[", out_channels,
                                        "], received ", TensorTypeToString(b)));
  }
  return absl::OkStatus();
}

// A fused Sum brings the tensor it adds as a fourth input.
int MaxConvInputs(const KernelSpec& spec) { return HasFusedSum(*spec.attributes) ? 4 : 3; }

}  // namespace

absl::StatusOr<ConvAttributes> ResolveConv2d(const KernelSpec& spec, const TensorType& x,
                                             const TensorType& w, int w_index) {
  ConvAttributes conv;
  REPLICAD_RETURN_IF_ERROR(CheckConvOperands(spec, x, w, w_index, &conv.group, &conv.out_channels));
  REPLICAD_ASSIGN_OR_RETURN(
      conv.window, ResolveWindow2d(spec, {x.shape[2], x.shape[3]}, {w.shape[2], w.shape[3]},
                                   /*ceil_mode=*/false));
  return conv;
}

absl::StatusOr<ConvAttributes> ParseConvAttributes(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(Conv2dInputs inputs,
                            ParseConv2dInputs(spec, MaxConvInputs(spec), "convolution"));
  REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ResolveConv2d(spec, inputs.x, inputs.w, 1));
  REPLICAD_RETURN_IF_ERROR(CheckConvBias(spec, conv.out_channels));
  return conv;
}

absl::StatusOr<Conv3dAttributes> ParseConv3dAttributes(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, MaxConvInputs(spec)));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType w, RequiredInput(spec, 1, "W"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, {DType::kFloat32}));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "W", w, {DType::kFloat32}));
  if (x.shape.size() != 5 || w.shape.size() != 5) {
    return NodeError(spec, absl::StrCat("a 3-D convolution takes X [N, C, D, H, W] and W of rank "
                                        "5, received X ",
                                        TensorTypeToString(x), " and W ", TensorTypeToString(w)));
  }
  Conv3dAttributes conv;
  REPLICAD_RETURN_IF_ERROR(CheckConvOperands(spec, x, w, 1, &conv.group, &conv.out_channels));
  REPLICAD_RETURN_IF_ERROR(CheckConvBias(spec, conv.out_channels));
  REPLICAD_ASSIGN_OR_RETURN(
      conv.window, ResolveWindowNd(spec, {x.shape[2], x.shape[3], x.shape[4]},
                                   {w.shape[2], w.shape[3], w.shape[4]}, /*ceil_mode=*/false));
  return conv;
}

absl::Status InferConv(KernelSpec* spec) {
  if (spec->inputs.size() > 1 && spec->inputs[0] && spec->inputs[0]->shape.size() == 5) {
    REPLICAD_ASSIGN_OR_RETURN(Conv3dAttributes conv, ParseConv3dAttributes(*spec));
    Shape out = {spec->inputs[0]->shape[0], conv.out_channels};
    out.insert(out.end(), conv.window.output.begin(), conv.window.output.end());
    spec->outputs = {TensorType{DType::kFloat32, std::move(out)}};
  } else {
    REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(*spec));
    spec->outputs = {TensorType{DType::kFloat32,
                                {spec->inputs[0]->shape[0], conv.out_channels,
                                 conv.window.output[0], conv.window.output[1]}}};
  }
  if (HasFusedSum(*spec->attributes)) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType addend, RequiredInput(*spec, 3, "addend"));
    if (!(addend == spec->outputs[0])) {
      return NodeError(*spec,
                       absl::StrCat("fused addend must be ", TensorTypeToString(spec->outputs[0]),
                                    " like the output, received ", TensorTypeToString(addend)));
    }
  }
  return absl::OkStatus();
}

}  // namespace replicad
