#include <cstdint>

#include "core/backends/cuda/kernels/axis_launch.h"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {
namespace {

__device__ bool IsNaN(float x) { return x != x; }
__device__ bool IsNaN(int64_t) { return false; }

// Whether a sorts before b, greatest (or least) first, NaN before all:
// the CPU's Greater and Less.
template <typename T>
__device__ bool Beats(T a, T b, bool max) {
  if (IsNaN(a)) return !IsNaN(b);
  return max ? a > b : a < b;
}

// The CPU's BestIndex: the first (or last) element no other one beats.
template <typename T>
__device__ int64_t BestIndex(const T* line, int64_t n, int64_t stride, bool max, bool last) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    const T x = line[i * stride];
    const T b = line[best * stride];
    if (Beats(x, b, max) || (last && !Beats(b, x, max))) best = i;
  }
  return best;
}

template <typename T>
__global__ void ArgReduceKernel(const T* in, int64_t* out, int64_t lines, int64_t n, int64_t inner,
                                bool max, bool last) {
  REPLICAD_GRID_STRIDE_LOOP(l, lines) {
    out[l] = BestIndex(in + (l / inner) * n * inner + l % inner, n, inner, max, last);
  }
}

__global__ void HardmaxKernel(const float* in, float* out, int64_t lines, int64_t n,
                              int64_t inner) {
  REPLICAD_GRID_STRIDE_LOOP(l, lines) {
    const int64_t start = (l / inner) * n * inner + l % inner;
    const int64_t best = BestIndex(in + start, n, inner, true, false);
    for (int64_t i = 0; i < n; ++i) out[start + i * inner] = i == best ? 1.0f : 0.0f;
  }
}

template <typename T>
__global__ void CumSumKernel(const T* in, T* out, int64_t lines, int64_t n, int64_t inner,
                             bool exclusive, bool reverse) {
  REPLICAD_GRID_STRIDE_LOOP(l, lines) {
    const int64_t start = (l / inner) * n * inner + l % inner;
    T sum = 0;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t i = start + (reverse ? n - 1 - step : step) * inner;
      if (exclusive) {
        out[i] = sum;  // The CPU's 0, then 0 + x_0, ...
        sum = static_cast<T>(sum + in[i]);
      } else {
        // The first element as it is (0 + -0 would be +0), as the CPU's.
        sum = step == 0 ? in[i] : static_cast<T>(sum + in[i]);
        out[i] = sum;
      }
    }
  }
}

template <typename T>
__global__ void TriluKernel(const T* in, T* out, int64_t n, int64_t rows, int64_t cols, int64_t k,
                            bool upper) {
  REPLICAD_GRID_STRIDE_LOOP(e, n) {
    const int64_t col = e % cols;
    const int64_t row = (e / cols) % rows;
    const bool kept = upper ? col >= row + k : col <= row + k;
    out[e] = kept ? in[e] : T{0};
  }
}

template <typename T>
void ArgReduceOn(const T* in, int64_t* out, int64_t outer, int64_t axis_dim, int64_t inner,
                 bool max, bool last, cudaStream_t stream) {
  const int64_t lines = outer * inner;
  if (lines == 0) return;
  ArgReduceKernel<<<BlocksFor(lines), kThreadsPerBlock, 0, stream>>>(in, out, lines, axis_dim,
                                                                     inner, max, last);
}

template <typename T>
void CumSumOn(const T* in, T* out, int64_t outer, int64_t axis_dim, int64_t inner, bool exclusive,
              bool reverse, cudaStream_t stream) {
  const int64_t lines = outer * inner;
  if (lines == 0) return;
  CumSumKernel<<<BlocksFor(lines), kThreadsPerBlock, 0, stream>>>(in, out, lines, axis_dim, inner,
                                                                  exclusive, reverse);
}

}  // namespace

void LaunchArgReduce(const float* in, int64_t* out, int64_t outer, int64_t axis_dim, int64_t inner,
                     bool max, bool last, cudaStream_t stream) {
  ArgReduceOn(in, out, outer, axis_dim, inner, max, last, stream);
}

void LaunchArgReduce(const int64_t* in, int64_t* out, int64_t outer, int64_t axis_dim,
                     int64_t inner, bool max, bool last, cudaStream_t stream) {
  ArgReduceOn(in, out, outer, axis_dim, inner, max, last, stream);
}

void LaunchHardmax(const float* in, float* out, int64_t outer, int64_t axis_dim, int64_t inner,
                   cudaStream_t stream) {
  const int64_t lines = outer * inner;
  if (lines == 0 || axis_dim == 0) return;
  HardmaxKernel<<<BlocksFor(lines), kThreadsPerBlock, 0, stream>>>(in, out, lines, axis_dim, inner);
}

void LaunchCumSum(const float* in, float* out, int64_t outer, int64_t axis_dim, int64_t inner,
                  bool exclusive, bool reverse, cudaStream_t stream) {
  CumSumOn(in, out, outer, axis_dim, inner, exclusive, reverse, stream);
}

void LaunchCumSum(const int64_t* in, int64_t* out, int64_t outer, int64_t axis_dim, int64_t inner,
                  bool exclusive, bool reverse, cudaStream_t stream) {
  CumSumOn(in, out, outer, axis_dim, inner, exclusive, reverse, stream);
}

void LaunchTrilu(const void* in, void* out, int64_t matrices, int64_t rows, int64_t cols, int64_t k,
                 bool upper, size_t element_size, cudaStream_t stream) {
  const int64_t n = matrices * rows * cols;
  if (n == 0) return;
  if (element_size == 8) {
    TriluKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out), n, rows, cols, k, upper);
  } else {
    TriluKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out), n, rows, cols, k, upper);
  }
}

}  // namespace replicad
