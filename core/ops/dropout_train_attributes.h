#ifndef REPLICAD_CORE_OPS_DROPOUT_TRAIN_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_DROPOUT_TRAIN_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// What a replicad.DropoutTrain kernel needs of its node, whatever the backend.
struct DropoutTrainAttributes {
  float ratio = 0.5f;      // In [0, 1).
  uint64_t node_seed = 0;  // replicad.node_seed: keys this node's masks.
  int64_t rows = 0;        // X's dim 0 (1 for a scalar): masks are keyed by global row.
  int64_t row_size = 0;    // Elements per row.
};

// The ratio from the attribute (opset < 12) or the constant input (else;
// 0.5 when absent), checked; InvalidArgument naming the node otherwise.
absl::StatusOr<DropoutTrainAttributes> ParseDropoutTrainAttributes(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_DROPOUT_TRAIN_ATTRIBUTES_H_
