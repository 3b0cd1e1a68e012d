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

std::string Ints(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

// Attribute `name` as 2 values of at least `minimum`, or `fallback` when absent.
absl::StatusOr<std::array<int64_t, 2>> Pair(const KernelSpec& spec, const std::string& name,
                                            int64_t fallback, int64_t minimum) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> values,
                            IntsAttribute(spec, name, {fallback, fallback}));
  if (values.size() != 2 || values[0] < minimum || values[1] < minimum) {
    return NodeError(spec, absl::StrCat("attribute '", name, "' must hold 2 values >= ", minimum,
                                        " for a 2-D ConvTranspose, received ", Ints(values)));
  }
  return std::array<int64_t, 2>{values[0], values[1]};
}

// Group, out_channels and kernel from W, checked against X, kernel_shape and B.
absl::Status ParseChannels(const KernelSpec& spec, const TensorType& x, const TensorType& w,
                           ConvTransposeAttributes* conv) {
  REPLICAD_ASSIGN_OR_RETURN(conv->group, IntAttribute(spec, "group", 1));
  const int64_t channels = x.shape[1];
  if (conv->group < 1 || channels % conv->group != 0) {
    return NodeError(spec, absl::StrCat("attribute 'group' must be positive and divide X's ",
                                        channels, " channels, received ", conv->group));
  }
  if (w.shape[0] != channels) {
    return NodeError(spec,
                     absl::StrCat("input 1 'W' must be [C, M/group, kH, kW] with C = ", channels,
                                  " (X's channels) in dim 0, received ", TensorTypeToString(w)));
  }
  conv->out_channels = w.shape[1] * conv->group;
  conv->kernel = {w.shape[2], w.shape[3]};
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel_shape,
                            IntsAttribute(spec, "kernel_shape", {w.shape[2], w.shape[3]}));
  if (kernel_shape != std::vector<int64_t>{w.shape[2], w.shape[3]}) {
    return NodeError(
        spec, absl::StrCat("attribute 'kernel_shape' must match W's spatial dims [", w.shape[2],
                           ",", w.shape[3], "], received ", Ints(kernel_shape)));
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
absl::StatusOr<std::array<int64_t, 2>> TargetOutput(const KernelSpec& spec, const TensorType& x,
                                                    const ConvTransposeAttributes& conv) {
  std::array<int64_t, 2> target{x.shape[2] * conv.strides[0], x.shape[3] * conv.strides[1]};
  if (!spec.attributes->Has("output_shape")) return target;
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> output_shape,
                            IntsAttribute(spec, "output_shape", {}));
  // ONNX gives the spatial dims; some exporters give all four.
  if (output_shape.size() == 4 && output_shape[0] == x.shape[0] &&
      output_shape[1] == conv.out_channels) {
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  }
  if (output_shape.size() != 2 || output_shape[0] < 1 || output_shape[1] < 1) {
    return NodeError(spec, absl::StrCat("attribute 'output_shape' must hold 2 positive "
                                        "spatial dims (or [N, M, H, W] matching X and W), "
                                        "received ",
                                        Ints(output_shape)));
  }
  return std::array<int64_t, 2>{output_shape[0], output_shape[1]};
}

// Pads that take the unpadded output size `full` to `target`. ONNX puts the
// odd padding element at the end for SAME_UPPER and at the start otherwise;
// explicit pads are ignored.
void PadToTarget(const std::string& auto_pad, const std::array<int64_t, 2>& full,
                 const std::array<int64_t, 2>& target, ConvTransposeAttributes* conv) {
  for (int i = 0; i < 2; ++i) {
    const int64_t total = full[i] - target[i];
    const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor(total / 2)
    conv->pads_begin[i] = auto_pad == "SAME_UPPER" ? half : total - half;
    conv->pads_end[i] = total - conv->pads_begin[i];
    conv->output[i] = target[i];
  }
}

// The pads attribute (NOTSET) or none (VALID), taken off the unpadded
// output size `full`.
absl::Status PadExplicitly(const KernelSpec& spec, const std::string& auto_pad,
                           const std::array<int64_t, 2>& full, ConvTransposeAttributes* conv) {
  if (auto_pad == "NOTSET") {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> pads, IntsAttribute(spec, "pads", {0, 0, 0, 0}));
    if (pads.size() != 4 || *std::min_element(pads.begin(), pads.end()) < 0) {
      return NodeError(spec, absl::StrCat("attribute 'pads' must hold 4 non-negative values "
                                          "[h_begin, w_begin, h_end, w_end], received ",
                                          Ints(pads)));
    }
    conv->pads_begin = {pads[0], pads[1]};
    conv->pads_end = {pads[2], pads[3]};
  } else if (spec.attributes->Has("pads")) {
    return NodeError(spec, "attribute 'pads' cannot be combined with auto_pad VALID");
  }
  for (int i = 0; i < 2; ++i) {
    conv->output[i] = full[i] - conv->pads_begin[i] - conv->pads_end[i];
    if (conv->output[i] < 1) {
      return NodeError(spec, absl::StrCat("spatial dim ", i, " would have size ", conv->output[i],
                                          ": pads ", conv->pads_begin[i], "+", conv->pads_end[i],
                                          " exceed the unpadded output size ", full[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ConvTransposeAttributes> ParseConvTransposeAttributes(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(Conv2dInputs inputs,
                            ParseConv2dInputs(spec, 3, "transposed convolution"));
  const TensorType& x = inputs.x;
  ConvTransposeAttributes conv;
  REPLICAD_RETURN_IF_ERROR(ParseChannels(spec, x, inputs.w, &conv));
  REPLICAD_ASSIGN_OR_RETURN(conv.strides, Pair(spec, "strides", 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(conv.dilations, Pair(spec, "dilations", 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(conv.output_padding, Pair(spec, "output_padding", 0, 0));
  REPLICAD_ASSIGN_OR_RETURN(std::string auto_pad, AutoPad(spec));

  // The output size before padding is taken off.
  std::array<int64_t, 2> full{};
  for (int i = 0; i < 2; ++i) {
    full[i] = conv.strides[i] * (x.shape[2 + i] - 1) + conv.output_padding[i] +
              (conv.kernel[i] - 1) * conv.dilations[i] + 1;
  }
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (spec.attributes->Has("output_shape") || same) {
    std::array<int64_t, 2> target;
    REPLICAD_ASSIGN_OR_RETURN(target, TargetOutput(spec, x, conv));
    PadToTarget(auto_pad, full, target, &conv);
    return conv;
  }
  REPLICAD_RETURN_IF_ERROR(PadExplicitly(spec, auto_pad, full, &conv));
  return conv;
}

absl::Status InferConvTranspose(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(ConvTransposeAttributes conv, ParseConvTransposeAttributes(*spec));
  spec->outputs = {
      TensorType{DType::kFloat32,
                 {spec->inputs[0]->shape[0], conv.out_channels, conv.output[0], conv.output[1]}}};
  return absl::OkStatus();
}

}  // namespace replicad
