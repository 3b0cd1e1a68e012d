#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/pool3d_launch.h"
#include "core/ops/pool3d_window.h"

namespace replicad {
namespace {

// Output element i is (plane, od, oh, ow), row-major.
__global__ void Pool3dKernel(const float* x, float* y, int64_t n, Pool3dWindow w) {
  const int64_t in_plane = w.axes[0].size * w.axes[1].size * w.axes[2].size;
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t ow = i % w.out[2];
    const int64_t oh = (i / w.out[2]) % w.out[1];
    const int64_t od = (i / (w.out[2] * w.out[1])) % w.out[0];
    const int64_t plane = i / (w.out[2] * w.out[1] * w.out[0]);
    y[i] = Pool3dValue(w, x + plane * in_plane, od, oh, ow);
  }
}

}  // namespace

void LaunchPool3d(const float* x, float* y, int64_t planes, const Pool3dWindow& window,
                  cudaStream_t stream) {
  const int64_t n = planes * window.out[0] * window.out[1] * window.out[2];
  if (n == 0) return;
  Pool3dKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, y, n, window);
}

}  // namespace replicad
