#ifndef REPLICAD_CORE_OPS_CONV_TRANSPOSE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_CONV_TRANSPOSE_ATTRIBUTES_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// ConvTranspose with X [N, C, spatial...] over N spatial dims (2: H, W; 3:
// D, H, W), W [C, M/group, k...] and optional B [M]; output [N, M,
// output...] with, per spatial dim i,
//   output[i] = strides[i] * (X[2+i] - 1) + output_padding[i]
//               + (kernel[i] - 1) * dilations[i] + 1 - pads_begin[i] - pads_end[i].
// Dims outermost first; dilations are ONNX's (1 = dense). When the node
// gives output_shape, or auto_pad is SAME_UPPER/SAME_LOWER (output = X *
// strides), the pads are derived from the output size as ONNX specifies and
// may then be negative: a negative pad adds output rows that no input
// reaches (they hold the bias only).
template <size_t N>
struct ConvTransposeGeometry {
  std::array<int64_t, N> kernel{};
  std::array<int64_t, N> strides{};
  std::array<int64_t, N> dilations{};
  std::array<int64_t, N> pads_begin{};
  std::array<int64_t, N> pads_end{};
  std::array<int64_t, N> output_padding{};
  std::array<int64_t, N> output{};
  int64_t group = 1;
  int64_t out_channels = 0;  // M.
};
using ConvTransposeAttributes = ConvTransposeGeometry<2>;
using ConvTranspose3dAttributes = ConvTransposeGeometry<3>;

// Validates a ConvTranspose node (inputs, dtypes, attributes auto_pad,
// dilations, group, kernel_shape, output_padding, output_shape, pads,
// strides) and resolves its geometry. InvalidArgument naming the node, the
// input or attribute, the expected and the received value for a malformed
// node; Unimplemented for valid forms other than 2-D float32.
absl::StatusOr<ConvTransposeAttributes> ParseConvTransposeAttributes(const KernelSpec& spec);

// The same for X [N, C, D, H, W] and W of rank 5, with the same checks and
// messages. The backends' 3-D transposed convolutions read it; every other
// consumer (the gradients) keeps to ParseConvTransposeAttributes, which
// refuses rank 5 as Unimplemented.
absl::StatusOr<ConvTranspose3dAttributes> ParseConvTranspose3dAttributes(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_CONV_TRANSPOSE_ATTRIBUTES_H_
