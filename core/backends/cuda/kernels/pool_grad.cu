#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/pool_grad_launch.h"

namespace replicad {
namespace {

__device__ __forceinline__ int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t Max64(int64_t a, int64_t b) { return a > b ? a : b; }

// One thread per dY element: the first maximum of its window, scanned as the
// CPU kernel scans it (rows, then columns; strictly greater replaces).
__global__ void MaxPoolArgmaxKernel(const float* x, int64_t* argmax, PoolGradGeometry g) {
  const int64_t n = g.planes * g.out_height * g.out_width;
  REPLICAD_GRID_STRIDE_LOOP(e, n) {
    const int64_t j = e % g.out_width;
    const int64_t i = (e / g.out_width) % g.out_height;
    const int64_t p = e / (g.out_width * g.out_height);
    const float* xp = x + p * g.height * g.width;
    int64_t best = -1;
    float best_value = 0.0f;
    for (int64_t ki = 0; ki < g.kernel[0]; ++ki) {
      const int64_t r = i * g.strides[0] - g.pads_begin[0] + ki * g.dilations[0];
      if (r < 0 || r >= g.height) continue;
      for (int64_t kj = 0; kj < g.kernel[1]; ++kj) {
        const int64_t c = j * g.strides[1] - g.pads_begin[1] + kj * g.dilations[1];
        if (c < 0 || c >= g.width) continue;
        const float v = xp[r * g.width + c];
        if (best < 0 || v > best_value) {
          best = r * g.width + c;
          best_value = v;
        }
      }
    }
    argmax[e] = best;
  }
}

// The windows along one dim whose tap k covers `at`: window o = (at + pad -
// k * dilation) / stride when that divides. Walking k downwards visits them
// in increasing o, the order the CPU kernel adds them in.
__device__ __forceinline__ int64_t WindowOfTap(int64_t at, int64_t k, int64_t pad, int64_t stride,
                                               int64_t dilation, int64_t windows) {
  const int64_t offset = at + pad - k * dilation;
  if (offset < 0 || offset % stride != 0) return -1;
  const int64_t o = offset / stride;
  return o < windows ? o : -1;
}

// One thread per dX element: the dY of each window whose first maximum it is.
__global__ void MaxPoolGradGatherKernel(const float* dy, const int64_t* argmax, float* dx,
                                        PoolGradGeometry g) {
  const int64_t n = g.planes * g.height * g.width;
  REPLICAD_GRID_STRIDE_LOOP(e, n) {
    const int64_t c = e % g.width;
    const int64_t r = (e / g.width) % g.height;
    const int64_t p = e / (g.width * g.height);
    const int64_t self = r * g.width + c;
    const int64_t base = p * g.out_height * g.out_width;
    float sum = 0.0f;
    for (int64_t ki = g.kernel[0] - 1; ki >= 0; --ki) {
      const int64_t i =
          WindowOfTap(r, ki, g.pads_begin[0], g.strides[0], g.dilations[0], g.out_height);
      if (i < 0) continue;
      for (int64_t kj = g.kernel[1] - 1; kj >= 0; --kj) {
        const int64_t j =
            WindowOfTap(c, kj, g.pads_begin[1], g.strides[1], g.dilations[1], g.out_width);
        if (j < 0) continue;
        const int64_t at = base + i * g.out_width + j;
        if (argmax[at] == self) sum += dy[at];
      }
    }
    dx[e] = sum;
  }
}

// The first and last window along one dim (dense taps) whose span
// [o * stride - pad, o * stride - pad + kernel) holds `at`; first > last
// when none does.
__device__ __forceinline__ void WindowsHolding(int64_t at, int64_t kernel, int64_t pad,
                                               int64_t stride, int64_t windows, int64_t* first,
                                               int64_t* last) {
  const int64_t top = at + pad;  // >= 0: at and pad are.
  const int64_t lowest_start = top - kernel + 1;
  *first = lowest_start <= 0 ? 0 : (lowest_start + stride - 1) / stride;
  const int64_t highest = top / stride;
  *last = Min64(highest, windows - 1);
}

// One thread per dX element: dy / divisor of each window holding it, the
// divisor computed as the CPU kernel computes it.
__global__ void AveragePoolGradKernel(const float* dy, float* dx, PoolGradGeometry g) {
  const int64_t n = g.planes * g.height * g.width;
  REPLICAD_GRID_STRIDE_LOOP(e, n) {
    const int64_t c = e % g.width;
    const int64_t r = (e / g.width) % g.height;
    const int64_t p = e / (g.width * g.height);
    const float* dyp = dy + p * g.out_height * g.out_width;
    int64_t i_first, i_last, j_first, j_last;
    WindowsHolding(r, g.kernel[0], g.pads_begin[0], g.strides[0], g.out_height, &i_first, &i_last);
    WindowsHolding(c, g.kernel[1], g.pads_begin[1], g.strides[1], g.out_width, &j_first, &j_last);
    float sum = 0.0f;
    for (int64_t i = i_first; i <= i_last; ++i) {
      const int64_t r0 = i * g.strides[0] - g.pads_begin[0];
      const int64_t r1 = r0 + g.kernel[0];
      const int64_t rows_in = Min64(r1, g.height) - Max64(r0, 0);
      for (int64_t j = j_first; j <= j_last; ++j) {
        const int64_t c0 = j * g.strides[1] - g.pads_begin[1];
        const int64_t c1 = c0 + g.kernel[1];
        const int64_t cols_in = Min64(c1, g.width) - Max64(c0, 0);
        const int64_t divisor = g.count_include_pad ? (Min64(r1, g.height + g.pads_end[0]) - r0) *
                                                          (Min64(c1, g.width + g.pads_end[1]) - c0)
                                                    : rows_in * cols_in;
        if (divisor <= 0 || rows_in <= 0 || cols_in <= 0) continue;
        sum += dyp[i * g.out_width + j] / static_cast<float>(divisor);
      }
    }
    dx[e] = sum;
  }
}

__global__ void GlobalAveragePoolGradKernel(const float* dy, float* dx, int64_t planes,
                                            int64_t plane_size, float scale) {
  const int64_t n = planes * plane_size;
  REPLICAD_GRID_STRIDE_LOOP(e, n) { dx[e] = dy[e / plane_size] * scale; }
}

}  // namespace

void LaunchMaxPoolArgmax(const float* x, int64_t* argmax, const PoolGradGeometry& g,
                         cudaStream_t stream) {
  const int64_t n = g.planes * g.out_height * g.out_width;
  if (n == 0) return;
  MaxPoolArgmaxKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, argmax, g);
}

void LaunchMaxPoolGradGather(const float* dy, const int64_t* argmax, float* dx,
                             const PoolGradGeometry& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.height * g.width;
  if (n == 0) return;
  MaxPoolGradGatherKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(dy, argmax, dx, g);
}

void LaunchAveragePoolGrad(const float* dy, float* dx, const PoolGradGeometry& g,
                           cudaStream_t stream) {
  const int64_t n = g.planes * g.height * g.width;
  if (n == 0) return;
  AveragePoolGradKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(dy, dx, g);
}

void LaunchGlobalAveragePoolGrad(const float* dy, float* dx, int64_t planes, int64_t plane_size,
                                 float scale, cudaStream_t stream) {
  const int64_t n = planes * plane_size;
  if (n == 0) return;
  GlobalAveragePoolGradKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(dy, dx, planes,
                                                                             plane_size, scale);
}

}  // namespace replicad
