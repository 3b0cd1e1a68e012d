#ifndef REPLICAD_CORE_OPS_INDEX_MAP_H_
#define REPLICAD_CORE_OPS_INDEX_MAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// A copy in which each output element reads one input element, chosen
// independently per output dim, or a fill value: Transpose, Slice, Pad,
// Expand, Tile, DepthToSpace and SpaceToDepth are each such a table, and every backend runs them
// from it.
//
// Output element (o_0, ..., o_{r-1}) of `output` (row-major) is
// input[offsets[0][o_0] + ... + offsets[r-1][o_{r-1}]] (offsets in elements
// of the input), or the fill value when any offsets[d][o_d] is kFill.
// offsets[d] has output[d] entries; a rank-0 output copies input element 0.
struct IndexMap {
  static constexpr int64_t kFill = -1;
  Shape output;
  std::vector<std::vector<int64_t>> offsets;
  uint64_t fill_bits = 0;  // The fill value's bytes (Pad's constant), zero-extended.
};

// The tables of a valid node of each op (as its shape rule accepted it);
// InvalidArgument or Unimplemented from the op's attribute parser otherwise.
absl::StatusOr<IndexMap> TransposeIndexMap(const KernelSpec& spec);
absl::StatusOr<IndexMap> SliceIndexMap(const KernelSpec& spec);
absl::StatusOr<IndexMap> PadIndexMap(const KernelSpec& spec);
absl::StatusOr<IndexMap> ExpandIndexMap(const KernelSpec& spec);
// Tile, DepthToSpace and SpaceToDepth (rearrange_attributes.h).
absl::StatusOr<IndexMap> TileIndexMap(const KernelSpec& spec);
absl::StatusOr<IndexMap> DepthSpaceIndexMap(const KernelSpec& spec);

// Row-major strides of `shape`, in elements.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_INDEX_MAP_H_
