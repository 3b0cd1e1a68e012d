#ifndef REPLICAD_CORE_OPS_CONV_TRANSPOSE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_CONV_TRANSPOSE_ATTRIBUTES_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// 2-D ConvTranspose with X [N, C, H, W], W [C, M/group, kH, kW] and optional
// B [M]; output [N, M, output[0], output[1]] with, per spatial dim i,
//   output[i] = strides[i] * (X[2+i] - 1) + output_padding[i]
//               + (kernel[i] - 1) * dilations[i] + 1 - pads_begin[i] - pads_end[i].
// Index 0 is H, 1 is W; dilations are ONNX's (1 = dense). When the node gives
// output_shape, or auto_pad is SAME_UPPER/SAME_LOWER (output = X * strides),
// the pads are derived from the output size as ONNX specifies and may then
// be negative: a negative pad adds output rows that no input reaches (they
// hold the bias only).
struct ConvTransposeAttributes {
  std::array<int64_t, 2> kernel{};
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 2> dilations{1, 1};
  std::array<int64_t, 2> pads_begin{};
  std::array<int64_t, 2> pads_end{};
  std::array<int64_t, 2> output_padding{};
  std::array<int64_t, 2> output{};
  int64_t group = 1;
  int64_t out_channels = 0;  // M.
};

// Validates a ConvTranspose node (inputs, dtypes, attributes auto_pad,
// dilations, group, kernel_shape, output_padding, output_shape, pads,
// strides) and resolves its geometry. InvalidArgument naming the node, the
// input or attribute, the expected and the received value for a malformed
// node; Unimplemented for valid forms other than 2-D float32.
absl::StatusOr<ConvTransposeAttributes> ParseConvTransposeAttributes(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_CONV_TRANSPOSE_ATTRIBUTES_H_
