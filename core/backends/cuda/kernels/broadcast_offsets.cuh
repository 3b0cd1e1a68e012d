#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BROADCAST_OFFSETS_CUH_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BROADCAST_OFFSETS_CUH_

#include <cstdint>

#include "core/backends/cuda/kernels/elementwise_launch.h"

namespace replicad {

// Internal to our .cu kernels: the offsets in `a` and `b` of output element
// i of a broadcast (BroadcastIndex), walking the dims from the innermost.
__device__ inline void BroadcastOffsets(int64_t i, const BroadcastIndex& index, int64_t* a,
                                        int64_t* b) {
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  for (int d = kMaxRank - 1; d >= 0; --d) {
    const int64_t dim = index.out_dims[d];
    const int64_t coordinate = i % dim;
    i /= dim;
    a_offset += coordinate * index.a_strides[d];
    b_offset += coordinate * index.b_strides[d];
  }
  *a = a_offset;
  *b = b_offset;
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BROADCAST_OFFSETS_CUH_
