#ifndef REPLICAD_CORE_OPS_CONV_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_CONV_ATTRIBUTES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/kernel.h"

namespace replicad {

// The geometry of a 2-D sliding window (Conv, MaxPool) with ONNX's defaults and
// auto_pad resolved against a concrete NCHW input. Index 0 is H, 1 is W. All
// values are in elements; dilations are ONNX's (1 = dense), pads are explicit
// (never negative) and `output` is the output's spatial size.
struct Window2d {
  std::array<int64_t, 2> kernel{};
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 2> dilations{1, 1};
  std::array<int64_t, 2> pads_begin{};
  std::array<int64_t, 2> pads_end{};
  std::array<int64_t, 2> output{};
};

// The same geometry for any number of spatial dims (3-D convolution; 1-D
// windows run as 2-D ones, see core/model/one_d_windows.h): one entry per
// spatial dim, outermost first.
struct WindowNd {
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;
  std::vector<int64_t> output;
};

// Conv with inputs X [N, C, H, W], W [M, C/group, kH, kW] and optional B [M];
// output [N, M, output[0], output[1]].
struct ConvAttributes {
  Window2d window;
  int64_t group = 1;
  int64_t out_channels = 0;  // M.
};

// Validates a Conv node (inputs, dtypes, attributes kernel_shape, strides,
// pads, dilations, group, auto_pad) and resolves its geometry.
// InvalidArgument naming the node, the input or attribute, the expected and
// the received value for a malformed node (e.g. W's channel count against X's
// and group); Unimplemented for valid forms other than 2-D float32.
absl::StatusOr<ConvAttributes> ParseConvAttributes(const KernelSpec& spec);

// The geometry of a 2-D convolution of X [N, C, H, W] by W [M, C/group, kH,
// kW] (input `w_index` of spec) under Conv's attributes and checks, whatever
// their element types (Conv, ConvInteger, QLinearConv); the bias is the
// caller's to check.
absl::StatusOr<ConvAttributes> ResolveConv2d(const KernelSpec& spec, const TensorType& x,
                                             const TensorType& w, int w_index);

// Conv with X [N, C, D, H, W] and W [M, C/group, kD, kH, kW]: the same
// checks, messages and defaults as ParseConvAttributes. The backends' 3-D
// convolutions read it; every other consumer (pooling, the gradients) keeps
// to ParseConvAttributes, which refuses rank 5 as Unimplemented.
struct Conv3dAttributes {
  WindowNd window;
  int64_t group = 1;
  int64_t out_channels = 0;
};
absl::StatusOr<Conv3dAttributes> ParseConv3dAttributes(const KernelSpec& spec);

// The same for MaxPool on X [N, C, H, W] (kernel_shape required). With
// ceil_mode the output size rounds up, so the last window may reach past
// pads_end; a library that floors must extend its right padding to
// (output - 1) * stride + dilated kernel - input - pads_begin (max pooling
// ignores padding, so the result is unchanged). Unimplemented for other
// spatial ranks.
absl::StatusOr<Window2d> ParseMaxPoolAttributes(const KernelSpec& spec);

// AveragePool on X [N, C, H, W] (kernel_shape required; ceil_mode from opset
// 10). With count_include_pad the divisor counts the explicit pads but not
// a ceil_mode window's part past pads_end (as the ONNX reference and PyTorch
// do); without it, the divisor counts only elements of X. Unimplemented for
// other spatial ranks.
struct AveragePoolAttributes {
  Window2d window;
  bool count_include_pad = false;
};
absl::StatusOr<AveragePoolAttributes> ParseAveragePoolAttributes(const KernelSpec& spec);

// MaxPool and AveragePool on X [N, C, D, H, W]: kernel_shape (3 values)
// required, strides, dilations, pads, auto_pad and ceil_mode as the 2-D
// parsers read them, count_include_pad (AveragePool; the divisor as
// ParseAveragePoolAttributes says) and storage_order (MaxPool, checked only).
// Float32 (int8 MaxPool is Unimplemented). The backends' 3-D pooling reads
// it (through core/ops/pool3d_window.h); the 2-D parsers refuse rank 5 as
// Unimplemented for the others.
struct Pool3dAttributes {
  WindowNd window;
  bool max = true;
  bool count_include_pad = false;
};
absl::StatusOr<Pool3dAttributes> ParsePool3dAttributes(const KernelSpec& spec);

// The part both share: reads strides, dilations, pads and auto_pad of spec
// for a window of `kernel` over `input` (H, W) and computes the output size,
// rounding up when `ceil_mode`.
absl::StatusOr<Window2d> ResolveWindow2d(const KernelSpec& spec, std::array<int64_t, 2> input,
                                         std::array<int64_t, 2> kernel, bool ceil_mode);
// "[h_begin, w_begin, h_end, w_end]" for 2 spatial dims, with d first for 3:
// how a pads attribute lists its values, for messages.
std::string PadsLayout(size_t count);

// ResolveWindow2d for any number of spatial dims (input and kernel of one
// size; strides, dilations and pads must match it).
absl::StatusOr<WindowNd> ResolveWindowNd(const KernelSpec& spec, const std::vector<int64_t>& input,
                                         const std::vector<int64_t>& kernel, bool ceil_mode);

// The data and weight inputs of a 2-D convolution-like node: X [N, C, H, W]
// and a W of rank 4, each float32. Conv and ConvTranspose share this check so
// both reject a malformed X or W with the same messages.
struct Conv2dInputs {
  TensorType x;
  TensorType w;
};

// InvalidArgument unless X is [N, C, spatial...]; Unimplemented ("only 2-D
// <what> ...") unless it is 4-D. Shared by Conv, ConvTranspose and pooling.
absl::Status CheckSpatial2d(const KernelSpec& spec, const TensorType& x, absl::string_view what);

// Checks that spec has 2 to `max_inputs` inputs, that X (input 0) and W
// (input 1) are present and float32, that X has rank >= 3 and W the rank of
// X. InvalidArgument for a malformed node; Unimplemented when X's rank is not
// 4, with "only 2-D <what> (X of rank 4) is implemented" (`what` names the
// operation, e.g. "convolution").
absl::StatusOr<Conv2dInputs> ParseConv2dInputs(const KernelSpec& spec, int max_inputs,
                                               absl::string_view what);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_CONV_ATTRIBUTES_H_
