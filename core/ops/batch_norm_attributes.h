#ifndef REPLICAD_CORE_OPS_BATCH_NORM_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_BATCH_NORM_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// BatchNormalization in its inference form (running statistics):
//   Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B
// per channel. X is [N, C, D1, ...] viewed as [batch, channels, spatial] with
// spatial = prod(D1, ...) (1 for rank 2); a 1-D X is [N] with C = 1. scale,
// B, input_mean and input_var are [C].
struct BatchNormLayout {
  int64_t batch = 1;
  int64_t channels = 1;
  int64_t spatial = 1;
  float epsilon = 1e-5f;
};

// Validates the node (five float32 inputs of the shapes above; attributes
// epsilon, momentum and, from opset 14, training_mode). InvalidArgument naming
// the node, the input or attribute, the expected and the received value;
// Unimplemented for training_mode = 1, which updates statistics.
absl::StatusOr<BatchNormLayout> ParseBatchNormalization(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_BATCH_NORM_ATTRIBUTES_H_
