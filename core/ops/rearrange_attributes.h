#ifndef REPLICAD_CORE_OPS_REARRANGE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_REARRANGE_ATTRIBUTES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// Ops that move elements without computing any, each an IndexMap
// (index_map.h), so every backend that runs index maps runs them:
//   Tile          input 0 repeated repeats[d] times along each dim d; input 1
//                 'repeats' (int64[rank], each >= 0) known when the plan is made.
//   DepthToSpace  [N, C, H, W] to [N, C / b^2, H * b, W * b], b = blocksize:
//                 mode "DCR" (default) takes the block offset from the outer
//                 part of the channel, "CRD" from the inner.
//   SpaceToDepth  [N, C, H, W] to [N, C * b^2, H / b, W / b] (DCR's inverse).
// Any dtype.

// Tile's repeats, checked.
absl::StatusOr<std::vector<int64_t>> ParseTileRepeats(const KernelSpec& spec);

struct DepthSpaceAttributes {
  int64_t block = 1;
  bool crd = false;  // DepthToSpace's mode "CRD".
};
// DepthToSpace and SpaceToDepth: blocksize >= 1 that divides C (by b^2,
// DepthToSpace) or H and W (SpaceToDepth); rank 4.
absl::StatusOr<DepthSpaceAttributes> ParseDepthSpace(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_REARRANGE_ATTRIBUTES_H_
