#ifndef REPLICAD_CORE_OPS_RESIZE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_RESIZE_ATTRIBUTES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// Resize (opset 11 on; Upsample's successor), parsed once for the shape rule
// and the kernels: per axis of the input, where each output coordinate reads.
// Nearest mode reads `low`; linear mode reads (1 - weight) x low + weight x
// high. Indices are clamped to the input (ONNX's edge padding), so every
// read is in bounds. Unimplemented for cubic mode, tf_crop_and_resize,
// antialias and keep_aspect_ratio_policy other than stretch; InvalidArgument
// naming the node and the input or attribute for a malformed node. scales,
// sizes (and roi) must be known when the plan is made.
struct ResizeAxis {
  int64_t input = 0;
  int64_t output = 0;
  std::vector<int64_t> low;   // One per output coordinate.
  std::vector<int64_t> high;  // Linear mode only.
  std::vector<float> weight;  // Linear mode only: of `high`.
};
struct ResizeLayout {
  bool linear = false;
  std::vector<ResizeAxis> axes;  // One per input dim.
  std::vector<int64_t> output_shape;
};
absl::StatusOr<ResizeLayout> ParseResize(const KernelSpec& spec);

// Upsample (opsets 7-9, deprecated for Resize): scales >= 1 per dim from the
// attribute (opset 7) or input 1 (opset 9, known when the plan is made),
// mode nearest or linear ("bilinear" too), read as Resize with asymmetric
// coordinates and nearest_mode floor.
absl::StatusOr<ResizeLayout> ParseUpsample(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_RESIZE_ATTRIBUTES_H_
