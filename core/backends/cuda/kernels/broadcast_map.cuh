#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BROADCAST_MAP_CUH_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BROADCAST_MAP_CUH_

#include <cstdint>

#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {

// Internal to our .cu kernels: broadcasts of two operands. The offsets in
// `a` and `b` of output element i (BroadcastIndex), walking the dims from
// the innermost.
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

// out[i] = f(a[ai], b[bi]) over the broadcast of `a` and `b` to the output
// (`f` a device functor: a binary op, a comparison, a logic op).
template <typename In, typename Out, typename F>
__global__ void BroadcastMapKernel(const In* a, const In* b, Out* out, int64_t n,
                                   BroadcastIndex index, F f) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t ai, bi;
    BroadcastOffsets(i, index, &ai, &bi);
    out[i] = f(a[ai], b[bi]);
  }
}

// Enqueues BroadcastMapKernel on `stream` (nothing for n == 0).
template <typename In, typename Out, typename F>
void LaunchBroadcastMap(const In* a, const In* b, Out* out, int64_t n, const BroadcastIndex& index,
                        F f, cudaStream_t stream) {
  if (n == 0) return;
  BroadcastMapKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(a, b, out, n, index, f);
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BROADCAST_MAP_CUH_
