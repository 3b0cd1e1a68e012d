#ifndef REPLICAD_CORE_OPS_SOFTMAX_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_SOFTMAX_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// Softmax of a row-major input viewed as [outer, axis_size, inner] and
// normalized along the middle dim. Before opset 13 ONNX coerces the input to
// 2-D at `axis` (default 1): outer = prod(dims[:axis]), axis_size =
// prod(dims[axis:]), inner = 1. From opset 13 it normalizes along the single
// dim `axis` (default -1): axis_size = dims[axis], inner = prod(dims[axis+1:]).
struct SoftmaxLayout {
  int64_t outer = 1;
  int64_t axis_size = 1;
  int64_t inner = 1;
};

// Validates a Softmax node (float32 input, axis in range for its rank and
// opset); InvalidArgument naming the node and the received axis or type.
absl::StatusOr<SoftmaxLayout> ParseSoftmaxLayout(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_SOFTMAX_ATTRIBUTES_H_
