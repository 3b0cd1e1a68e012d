#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/pool3d_launch.h"
#include "core/ops/pool3d_window.h"

namespace replicad {
namespace {

// Output element i of `w` over planes of X: its plane's offset in X and
// its (od, oh, ow), row-major.
struct OutputElement {
  int64_t x_offset, od, oh, ow;
};
__device__ OutputElement ElementOf(int64_t i, const Pool3dWindow& w) {
  const int64_t in_plane = w.axes[0].size * w.axes[1].size * w.axes[2].size;
  const int64_t plane = i / (w.out[2] * w.out[1] * w.out[0]);
  return {plane * in_plane, (i / (w.out[2] * w.out[1])) % w.out[0], (i / w.out[2]) % w.out[1],
          i % w.out[2]};
}

__global__ void Pool3dKernel(const float* x, float* y, int64_t n, Pool3dWindow w) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const OutputElement e = ElementOf(i, w);
    y[i] = Pool3dValue(w, x + e.x_offset, e.od, e.oh, e.ow);
  }
}

template <typename T>
__global__ void IntegerMaxPoolKernel(const T* x, T* y, int64_t n, Pool3dWindow w, T lowest) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const OutputElement e = ElementOf(i, w);
    y[i] = Pool3dIntegerMax(w, x + e.x_offset, e.od, e.oh, e.ow, lowest);
  }
}

}  // namespace

void LaunchIntegerMaxPool(const void* x, void* y, bool is_signed, int64_t planes,
                          const Pool3dWindow& window, cudaStream_t stream) {
  const int64_t n = planes * window.out[0] * window.out[1] * window.out[2];
  if (n == 0) return;
  if (is_signed) {
    IntegerMaxPoolKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const int8_t*>(x), static_cast<int8_t*>(y), n, window, int8_t{-128});
  } else {
    IntegerMaxPoolKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), n, window, uint8_t{0});
  }
}

void LaunchPool3d(const float* x, float* y, int64_t planes, const Pool3dWindow& window,
                  cudaStream_t stream) {
  const int64_t n = planes * window.out[0] * window.out[1] * window.out[2];
  if (n == 0) return;
  Pool3dKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, y, n, window);
}

}  // namespace replicad
