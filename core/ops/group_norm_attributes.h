#ifndef REPLICAD_CORE_OPS_GROUP_NORM_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_GROUP_NORM_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// InstanceNormalization and GroupNormalization of input 0 'X' [N, C,
// spatial...] (float32): the channels fall into `groups` groups of C / groups
// consecutive channels, and each (sample, group) is normalized by its own
// mean and (biased) variance over its channels and spatial positions:
//   y = (x - mean) / sqrt(var + epsilon) * scale + bias.
// InstanceNormalization is groups = C with scale and B of [C].
// GroupNormalization takes num_groups (dividing C); its scale and bias are
// [num_groups] through opset 20 and [C] from 21. epsilon defaults to 1e-5.
struct GroupNormLayout {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t groups = 0;
  int64_t spatial = 1;  // Elements per channel.
  float epsilon = 1e-5f;
  bool affine_per_group = false;  // scale and bias of [groups], not [C].
};

// InvalidArgument naming the node and the input or attribute otherwise.
absl::StatusOr<GroupNormLayout> ParseGroupNormalization(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_GROUP_NORM_ATTRIBUTES_H_
