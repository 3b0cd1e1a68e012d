#ifndef REPLICAD_CORE_OPS_LAYER_NORM_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_LAYER_NORM_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// LayerNormalization (ONNX opset 17) of a row-major X viewed as [rows, cols]
// with rows = prod(dims[:axis]) and cols = prod(dims[axis:]); each row is
// normalized on its own:
//   Mean = mean(row), InvStdDev = 1 / sqrt(mean((row - Mean)^2) + epsilon),
//   Y = (row - Mean) * InvStdDev * Scale + B.
// Scale and the optional B hold one value per column (the normalized dims,
// with any leading 1s). Outputs: Y as X; the optional Mean and InvStdDev are
// dims[:axis] followed by 1s, float32.
struct LayerNormLayout {
  int64_t rows = 1;
  int64_t cols = 1;
  float epsilon = 1e-5f;
  bool has_bias = false;
};

// Validates the node (float32 X of rank >= 1, axis in [-rank, rank), Scale
// and B as above, at most three outputs). InvalidArgument naming the node,
// the input or attribute, the expected and the received value; Unimplemented
// for a Scale or B that broadcasts within the normalized dims.
absl::StatusOr<LayerNormLayout> ParseLayerNormalization(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_LAYER_NORM_ATTRIBUTES_H_
