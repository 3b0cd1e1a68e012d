#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/slot_reduce_launch.h"

namespace replicad {
namespace {

__global__ void AccumulateKernel(float* sum, const float* addend, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { sum[i] += addend[i]; }
}

__global__ void ScaleKernel(float* data, int64_t n, float scale) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { data[i] *= scale; }
}

}  // namespace

void LaunchAccumulate(float* sum, const float* addend, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  AccumulateKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(sum, addend, n);
}

void LaunchScale(float* data, int64_t n, float scale, cudaStream_t stream) {
  if (n == 0) return;
  ScaleKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(data, n, scale);
}

}  // namespace replicad
