#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/layer_norm_launch.h"

namespace replicad {
namespace {

static_assert((kThreadsPerBlock & (kThreadsPerBlock - 1)) == 0,
              "the block reduction halves the block");

// The sum of every thread's `value` in the block, returned to all threads.
__device__ double BlockSum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreadsPerBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double sum = shared[0];
  __syncthreads();  // shared[] is reused by the next call.
  return sum;
}

// Block b normalizes rows b, b + gridDim.x, ...: the mean, then the variance
// about it (two passes, as the CPU kernel), then Y.
__global__ void LayerNormKernel(const float* x, const float* scale, const float* bias, float* y,
                                float* mean_out, float* inv_std_out, int64_t rows, int64_t cols,
                                float epsilon) {
  __shared__ double shared[kThreadsPerBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * cols;
    float* out = y + r * cols;
    double sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += row[c];
    const double mean = cols > 0 ? BlockSum(sum, shared) / static_cast<double>(cols) : 0.0;
    double squares = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double d = row[c] - mean;
      squares += d * d;
    }
    const double variance = cols > 0 ? BlockSum(squares, shared) / static_cast<double>(cols) : 0.0;
    const float inv_std = static_cast<float>(1.0 / sqrt(variance + epsilon));
    const float mean_f = static_cast<float>(mean);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = (row[c] - mean_f) * inv_std * scale[c];
      out[c] = bias != nullptr ? v + bias[c] : v;
    }
    if (threadIdx.x == 0) {
      if (mean_out != nullptr) mean_out[r] = mean_f;
      if (inv_std_out != nullptr) inv_std_out[r] = inv_std;
    }
  }
}

}  // namespace

void LaunchLayerNorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                     float* inv_std, int64_t rows, int64_t cols, float epsilon,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const int blocks = static_cast<int>(rows < kMaxBlocks ? rows : kMaxBlocks);
  LayerNormKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(x, scale, bias, y, mean, inv_std, rows,
                                                           cols, epsilon);
}

}  // namespace replicad
