#include "core/ops/index_map.h"

#include <cstring>

#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/slice_pad_attributes.h"

namespace replicad {
namespace {

// The offsets (start + o * step) * stride of output indices o in [0, size).
std::vector<int64_t> Strided(int64_t size, int64_t start, int64_t step, int64_t stride) {
  std::vector<int64_t> offsets(size);
  for (int64_t o = 0; o < size; ++o) offsets[o] = (start + o * step) * stride;
  return offsets;
}

}  // namespace

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

absl::StatusOr<IndexMap> TransposeIndexMap(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ParseTransposePerm(spec));
  IndexMap map;
  map.output = spec.outputs[0].shape;
  const std::vector<int64_t> in_strides = RowMajorStrides(spec.inputs[0]->shape);
  map.offsets.resize(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    map.offsets[d] = Strided(map.output[d], 0, 1, in_strides[perm[d]]);
  }
  return map;
}

absl::StatusOr<IndexMap> SliceIndexMap(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(SliceLayout layout, ParseSliceLayout(spec));
  IndexMap map;
  map.output = spec.outputs[0].shape;
  const std::vector<int64_t> in_strides = RowMajorStrides(spec.inputs[0]->shape);
  map.offsets.resize(in_strides.size());
  for (size_t d = 0; d < in_strides.size(); ++d) {
    map.offsets[d] = Strided(layout.output[d], layout.starts[d], layout.steps[d], in_strides[d]);
  }
  return map;
}

absl::StatusOr<IndexMap> PadIndexMap(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(PadLayout layout, ParsePadLayout(spec));
  IndexMap map;
  map.output = spec.outputs[0].shape;
  const Shape& in = spec.inputs[0]->shape;
  const std::vector<int64_t> in_strides = RowMajorStrides(in);
  map.offsets.resize(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    map.offsets[d].resize(layout.output[d]);
    for (int64_t o = 0; o < layout.output[d]; ++o) {
      const int64_t source =
          PadSourceIndex(layout.mode, o, layout.pads_begin[d], layout.pads_end[d], in[d]);
      map.offsets[d][o] = source < 0 ? IndexMap::kFill : source * in_strides[d];
    }
  }
  std::memcpy(&map.fill_bits, layout.value.raw_data(), layout.value.byte_size());
  return map;
}

absl::StatusOr<IndexMap> ExpandIndexMap(const KernelSpec& spec) {
  IndexMap map;
  map.output = spec.outputs[0].shape;
  const Shape in = PadToRank(spec.inputs[0]->shape, map.output.size());
  const std::vector<int64_t> in_strides = RowMajorStrides(in);
  map.offsets.resize(map.output.size());
  for (size_t d = 0; d < map.output.size(); ++d) {
    // A broadcast dim reads its single element for every output index.
    map.offsets[d] = Strided(map.output[d], 0, in[d] == 1 ? 0 : 1, in_strides[d]);
  }
  return map;
}

}  // namespace replicad
