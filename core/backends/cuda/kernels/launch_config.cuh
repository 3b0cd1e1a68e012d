#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAUNCH_CONFIG_CUH_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAUNCH_CONFIG_CUH_

#include <cstdint>

namespace replicad {

// Internal to our .cu kernels: how they are launched. Kernels loop over
// their elements grid-stride, so a bounded grid covers any n; 8 blocks per
// SM of an H100 (132 SMs) keep every SM busy.
inline constexpr int kThreadsPerBlock = 256;
inline constexpr int64_t kMaxBlocks = 1056;

inline int BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

}  // namespace replicad

// for (int64_t i = first index of this thread; i < n; i += threads in the grid)
#define REPLICAD_GRID_STRIDE_LOOP(i, n)                                                  \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAUNCH_CONFIG_CUH_
