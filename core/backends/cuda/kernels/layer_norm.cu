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

// The mean and the variance about it of `count` floats (two passes, as the
// CPU kernels), in double, to every thread of the block.
__device__ void BlockMoments(const float* in, int64_t count, double* shared, double* mean,
                             double* variance) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += in[i];
  *mean = count > 0 ? BlockSum(sum, shared) / static_cast<double>(count) : 0.0;
  double squares = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double d = in[i] - *mean;
    squares += d * d;
  }
  *variance = count > 0 ? BlockSum(squares, shared) / static_cast<double>(count) : 0.0;
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
    double mean = 0, variance = 0;
    BlockMoments(row, cols, shared, &mean, &variance);
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

__global__ void GroupNormKernel(const float* x, const float* scale, const float* bias, float* y,
                                int64_t blocks, int64_t groups, int64_t per_group, int64_t spatial,
                                bool affine_per_group, float epsilon) {
  __shared__ double shared[kThreadsPerBlock];
  const int64_t block = per_group * spatial;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const float* in = x + b * block;
    float* out = y + b * block;
    double mean = 0, variance = 0;
    BlockMoments(in, block, shared, &mean, &variance);
    const double inv_std = 1.0 / sqrt(variance + static_cast<double>(epsilon));
    const int64_t group = b % groups;
    for (int64_t i = threadIdx.x; i < block; i += blockDim.x) {
      const int64_t c = i / spatial;
      const int64_t affine = affine_per_group ? group : group * per_group + c;
      const float a = static_cast<float>(inv_std * scale[affine]);
      const float shift = static_cast<float>(bias[affine] - mean * inv_std * scale[affine]);
      out[i] = in[i] * a + shift;
    }
  }
}

}  // namespace

void LaunchGroupNorm(const float* x, const float* scale, const float* bias, float* y, int64_t batch,
                     int64_t channels, int64_t groups, int64_t spatial, bool affine_per_group,
                     float epsilon, cudaStream_t stream) {
  const int64_t blocks = batch * groups;
  if (blocks == 0) return;
  const int grid = static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  GroupNormKernel<<<grid, kThreadsPerBlock, 0, stream>>>(
      x, scale, bias, y, blocks, groups, channels / groups, spatial, affine_per_group, epsilon);
}

void LaunchLayerNorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                     float* inv_std, int64_t rows, int64_t cols, float epsilon,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const int blocks = static_cast<int>(rows < kMaxBlocks ? rows : kMaxBlocks);
  LayerNormKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(x, scale, bias, y, mean, inv_std, rows,
                                                           cols, epsilon);
}

}  // namespace replicad
