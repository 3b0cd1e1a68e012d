#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/resize_launch.h"

namespace replicad {
namespace {

template <typename T>
__global__ void ResizeNearestKernel(const T* in, T* out, int64_t n, DeviceResize r) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t rest = i;
    int64_t offset = 0;
    for (int d = r.rank - 1; d >= 0; --d) {
      const int64_t o = rest % r.out_dims[d];
      rest /= r.out_dims[d];
      offset += r.low[d][o] * r.in_strides[d];
    }
    out[i] = in[offset];
  }
}

// The CPU's LinearRow for one output element: corners in ascending order,
// each interpolated outer dim choosing low or high by one bit of the corner
// (the lowest bit for the first such dim), the corner's weight the product
// of its dims' weights in dim order starting from 1, the innermost dim
// blended as (1 - w) * a + w * b, and the corners summed onto 0. The _rn
// intrinsics keep nvcc from fusing a product and a sum into an FMA, which
// the CPU does not do.
__global__ void ResizeLinearKernel(const float* in, float* out, int64_t n, DeviceResize r) {
  const int inner = r.rank - 1;
  int outer_blended = 0;
  for (int d = 0; d < inner; ++d) outer_blended += r.interpolated[d] ? 1 : 0;
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t o[kMaxRank];
    int64_t rest = i;
    for (int d = inner; d >= 0; --d) {
      o[d] = rest % r.out_dims[d];
      rest /= r.out_dims[d];
    }
    const int64_t x = o[inner];
    float sum = 0.0f;
    for (int corner = 0; corner < (1 << outer_blended); ++corner) {
      int64_t base = 0;
      float weight = 1.0f;
      int bit = 0;
      for (int d = 0; d < inner; ++d) {
        if (!r.interpolated[d]) {
          base += r.low[d][o[d]] * r.in_strides[d];
          continue;
        }
        const bool high = (corner >> bit) & 1;
        ++bit;
        base += (high ? r.high[d][o[d]] : r.low[d][o[d]]) * r.in_strides[d];
        const float w = r.weight[d][o[d]];
        weight = __fmul_rn(weight, high ? w : __fsub_rn(1.0f, w));
      }
      const float* row = in + base;
      float term = row[r.low[inner][x]];
      if (r.interpolated[inner]) {
        const float w = r.weight[inner][x];
        term = __fadd_rn(__fmul_rn(__fsub_rn(1.0f, w), term), __fmul_rn(w, row[r.high[inner][x]]));
      }
      sum = __fadd_rn(sum, __fmul_rn(weight, term));
    }
    out[i] = sum;
  }
}

}  // namespace

void LaunchResizeNearest(const void* in, void* out, int64_t n, size_t element_size,
                         const DeviceResize& resize, cudaStream_t stream) {
  if (n == 0) return;
  if (element_size == 8) {
    ResizeNearestKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out), n, resize);
  } else {
    ResizeNearestKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out), n, resize);
  }
}

void LaunchResizeLinear(const float* in, float* out, int64_t n, const DeviceResize& resize,
                        cudaStream_t stream) {
  if (n == 0) return;
  ResizeLinearKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n, resize);
}

}  // namespace replicad
