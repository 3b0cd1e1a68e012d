#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/conv_transpose_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// The spatial dims' letters, for messages: "kH, kW" or "kD, kH, kW".
template <size_t N>
std::string KernelDims() {
  return N == 2 ? "kH, kW" : "kD, kH, kW";
}

// Dims [2, 2 + N) of `shape`.
template <size_t N>
std::array<int64_t, N> Spatial(const Shape& shape) {
  std::array<int64_t, N> dims{};
  for (size_t i = 0; i < N; ++i) dims[i] = shape[2 + i];
  return dims;
}

// Attribute `name` as N values of at least `minimum`, or `fallback` when absent.
template <size_t N>
absl::StatusOr<std::array<int64_t, N>> Values(const KernelSpec& spec, const std::string& name,
                                              int64_t fallback, int64_t minimum) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> values,
                            IntsAttribute(spec, name, std::vector<int64_t>(N, fallback)));
  if (values.size() != N || (N > 0 && *std::min_element(values.begin(), values.end()) < minimum)) {
    return NodeError(spec,
                     absl::StrCat("attribute '", name, "' must hold ", N, " values >= ", minimum,
                                  " for a ", N, "-D ConvTranspose, received ", FormatInts(values)));
  }
  std::array<int64_t, N> out{};
  std::copy(values.begin(), values.end(), out.begin());
  return out;
}

// Group, out_channels and kernel from W, checked against X, kernel_shape and B.
template <size_t N>
absl::Status ParseChannels(const KernelSpec& spec, const TensorType& x, const TensorType& w,
                           ConvTransposeGeometry<N>* conv) {
  REPLICAD_ASSIGN_OR_RETURN(conv->group, IntAttribute(spec, "group", 1));
  const int64_t channels = x.shape[1];
  if (conv->group < 1 || channels % conv->group != 0) {
    return NodeError(spec, absl::StrCat("attribute 'group' must be positive and divide X's ",
                                        channels, " channels, received ", conv->group));
  }
  if (w.shape[0] != channels) {
    return NodeError(spec, absl::StrCat("input 1 'W' must be [C, M/group, ", KernelDims<N>(),
                                        "] with C = ", channels, " (X's channels) in dim 0, ",
                                        "received ", TensorTypeToString(w)));
  }
  conv->out_channels = w.shape[1] * conv->group;
  conv->kernel = Spatial<N>(w.shape);
  const std::vector<int64_t> kernel(conv->kernel.begin(), conv->kernel.end());
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel_shape,
                            IntsAttribute(spec, "kernel_shape", kernel));
  if (kernel_shape != kernel) {
    return NodeError(spec,
                     absl::StrCat("attribute 'kernel_shape' must match W's spatial dims ",
                                  FormatInts(kernel), ", received ", FormatInts(kernel_shape)));
  }
  if (HasInput(spec, 2)) {
    const TensorType& b = *spec.inputs[2];
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 2, "B", b, {DType::kFloat32}));
    if (b.shape != Shape{conv->out_channels}) {
      return NodeError(spec,
                       absl::StrCat("input 2 'B' must be float32[", conv->out_channels,
                                    "] (W's dim 1 times group), received ", TensorTypeToString(b)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> AutoPad(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::string auto_pad, StringAttribute(spec, "auto_pad", "NOTSET"));
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" &&
      auto_pad != "SAME_LOWER") {
    return NodeError(spec, absl::StrCat("attribute 'auto_pad' must be NOTSET, VALID, SAME_UPPER "
                                        "or SAME_LOWER, received '",
                                        auto_pad, "'"));
  }
  return auto_pad;
}

// The spatial output size that output_shape asks for, else (SAME) X's
// times the strides.
template <size_t N>
absl::StatusOr<std::array<int64_t, N>> TargetOutput(const KernelSpec& spec, const TensorType& x,
                                                    const ConvTransposeGeometry<N>& conv) {
  std::array<int64_t, N> target{};
  for (size_t i = 0; i < N; ++i) target[i] = x.shape[2 + i] * conv.strides[i];
  if (!spec.attributes->Has("output_shape")) return target;
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> output_shape,
                            IntsAttribute(spec, "output_shape", {}));
  // ONNX gives the spatial dims; some exporters give all of them.
  if (output_shape.size() == N + 2 && output_shape[0] == x.shape[0] &&
      output_shape[1] == conv.out_channels) {
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  }
  if (output_shape.size() != N || *std::min_element(output_shape.begin(), output_shape.end()) < 1) {
    return NodeError(spec, absl::StrCat("attribute 'output_shape' must hold ", N,
                                        " positive spatial dims (or [N, M, spatial...] matching "
                                        "X and W), received ",
                                        FormatInts(output_shape)));
  }
  std::copy(output_shape.begin(), output_shape.end(), target.begin());
  return target;
}

// Pads that take the unpadded output size `full` to `target`. ONNX puts the
// odd padding element at the end for SAME_UPPER and at the start otherwise;
// explicit pads are ignored.
template <size_t N>
void PadToTarget(const std::string& auto_pad, const std::array<int64_t, N>& full,
                 const std::array<int64_t, N>& target, ConvTransposeGeometry<N>* conv) {
  for (size_t i = 0; i < N; ++i) {
    const int64_t total = full[i] - target[i];
    const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor(total / 2)
    conv->pads_begin[i] = auto_pad == "SAME_UPPER" ? half : total - half;
    conv->pads_end[i] = total - conv->pads_begin[i];
    conv->output[i] = target[i];
  }
}

// The pads attribute (NOTSET) or none (VALID), taken off the unpadded
// output size `full`.
template <size_t N>
absl::Status PadExplicitly(const KernelSpec& spec, const std::string& auto_pad,
                           const std::array<int64_t, N>& full, ConvTransposeGeometry<N>* conv) {
  if (auto_pad == "NOTSET") {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                              IntsAttribute(spec, "pads", std::vector<int64_t>(2 * N, 0)));
    if (pads.size() != 2 * N || *std::min_element(pads.begin(), pads.end()) < 0) {
      return NodeError(spec,
                       absl::StrCat("attribute 'pads' must hold ", 2 * N, " non-negative values ",
                                    PadsLayout(N), ", received ", FormatInts(pads)));
    }
    std::copy(pads.begin(), pads.begin() + N, conv->pads_begin.begin());
    std::copy(pads.begin() + N, pads.end(), conv->pads_end.begin());
  } else if (spec.attributes->Has("pads")) {
    return NodeError(spec, "attribute 'pads' cannot be combined with auto_pad VALID");
  }
  for (size_t i = 0; i < N; ++i) {
    conv->output[i] = full[i] - conv->pads_begin[i] - conv->pads_end[i];
    if (conv->output[i] < 1) {
      return NodeError(spec, absl::StrCat("spatial dim ", i, " would have size ", conv->output[i],
                                          ": pads ", conv->pads_begin[i], "+", conv->pads_end[i],
                                          " exceed the unpadded output size ", full[i]));
    }
  }
  return absl::OkStatus();
}

// The geometry of X and W (checked by the caller for rank N + 2).
template <size_t N>
absl::StatusOr<ConvTransposeGeometry<N>> ResolveGeometry(const KernelSpec& spec,
                                                         const TensorType& x, const TensorType& w) {
  ConvTransposeGeometry<N> conv;
  REPLICAD_RETURN_IF_ERROR(ParseChannels<N>(spec, x, w, &conv));
  REPLICAD_ASSIGN_OR_RETURN(conv.strides, Values<N>(spec, "strides", 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(conv.dilations, Values<N>(spec, "dilations", 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(conv.output_padding, Values<N>(spec, "output_padding", 0, 0));
  REPLICAD_ASSIGN_OR_RETURN(std::string auto_pad, AutoPad(spec));

  // The output size before padding is taken off.
  std::array<int64_t, N> full{};
  for (size_t i = 0; i < N; ++i) {
    full[i] = conv.strides[i] * (x.shape[2 + i] - 1) + conv.output_padding[i] +
              (conv.kernel[i] - 1) * conv.dilations[i] + 1;
  }
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (spec.attributes->Has("output_shape") || same) {
    std::array<int64_t, N> target;
    REPLICAD_ASSIGN_OR_RETURN(target, TargetOutput<N>(spec, x, conv));
    PadToTarget<N>(auto_pad, full, target, &conv);
    return conv;
  }
  REPLICAD_RETURN_IF_ERROR(PadExplicitly<N>(spec, auto_pad, full, &conv));
  return conv;
}

bool IsRank5(const KernelSpec& spec) {
  return spec.inputs.size() > 1 && spec.inputs[0].has_value() && spec.inputs[0]->shape.size() == 5;
}

}  // namespace

absl::StatusOr<ConvTransposeAttributes> ParseConvTransposeAttributes(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(Conv2dInputs inputs,
                            ParseConv2dInputs(spec, 3, "transposed convolution"));
  return ResolveGeometry<2>(spec, inputs.x, inputs.w);
}

absl::StatusOr<ConvTranspose3dAttributes> ParseConvTranspose3dAttributes(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType w, RequiredInput(spec, 1, "W"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, {DType::kFloat32}));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "W", w, {DType::kFloat32}));
  if (x.shape.size() != 5 || w.shape.size() != 5) {
    return NodeError(spec, absl::StrCat("a 3-D transposed convolution takes X [N, C, D, H, W] and "
                                        "W of rank 5, received X ",
                                        TensorTypeToString(x), " and W ", TensorTypeToString(w)));
  }
  return ResolveGeometry<3>(spec, x, w);
}

absl::Status InferConvTranspose(KernelSpec* spec) {
  Shape out;
  if (IsRank5(*spec)) {
    REPLICAD_ASSIGN_OR_RETURN(ConvTranspose3dAttributes conv,
                              ParseConvTranspose3dAttributes(*spec));
    out = {spec->inputs[0]->shape[0], conv.out_channels};
    out.insert(out.end(), conv.output.begin(), conv.output.end());
  } else {
    REPLICAD_ASSIGN_OR_RETURN(ConvTransposeAttributes conv, ParseConvTransposeAttributes(*spec));
    out = {spec->inputs[0]->shape[0], conv.out_channels, conv.output[0], conv.output[1]};
  }
  spec->outputs = {TensorType{DType::kFloat32, std::move(out)}};
  return absl::OkStatus();
}

}  // namespace replicad
