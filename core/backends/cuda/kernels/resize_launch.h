#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_RESIZE_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_RESIZE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backends/cuda/kernels/elementwise_launch.h"

namespace replicad {

// Internal to the CUDA kernels: Resize and Upsample (resize.cu) from the
// per-axis tables of core/ops/resize_attributes.h, copied to device memory
// when the kernel is built. One thread per output element; same conventions
// as elementwise_launch.h (enqueued on `stream`, nothing launched for n == 0,
// launch errors read with LastLaunchStatus).
struct DeviceResize {
  int rank = 0;  // At most kMaxRank; 0 copies the one element.
  // Plain arrays: device code indexes them (std::array's operator[] is host-only).
  int64_t out_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};  // Row-major, in elements.
  // Device memory owned by the kernel, out_dims[d] entries each: ResizeAxis's
  // low (every mode), high and weight (linear mode only).
  const int64_t* low[kMaxRank] = {};
  const int64_t* high[kMaxRank] = {};
  const float* weight[kMaxRank] = {};
  // Linear mode: the dims whose weights are not all 0, which the CPU kernel
  // blends (the others read `low` only).
  bool interpolated[kMaxRank] = {};
};

// Nearest mode: out[o] = in[sum over d of low[d][o_d] * in_strides[d]],
// copied as `element_size`-byte bit patterns (4 or 8), for any dtype.
void LaunchResizeNearest(const void* in, void* out, int64_t n, size_t element_size,
                         const DeviceResize& resize, cudaStream_t stream);

// Linear mode, float32, rank >= 1: the CPU kernel's sum over the 2^k
// corners of the k interpolated outer dims, in its order of operations and
// rounding every product and sum on its own (no FMA contraction), so the
// results are the CPU's bit for bit where its compiler does not contract
// either (x86-64 without FMA flags; NaN payloads aside).
void LaunchResizeLinear(const float* in, float* out, int64_t n, const DeviceResize& resize,
                        cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_RESIZE_LAUNCH_H_
