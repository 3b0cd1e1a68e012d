#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/optimizer_launch.h"
#include "core/ops/optimizer_step.h"

namespace replicad {
namespace {

// The scalars travel by value in the kernel's parameter space; every element
// applies exactly the host Optimizer's rule (core/ops/optimizer_step.h).
__global__ void SgdStepKernel(OptimizerStepScalars s, float* __restrict__ p,
                              const float* __restrict__ g, float* __restrict__ buf, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { SgdUpdate(p[i], g[i], buf != nullptr ? buf + i : nullptr, s); }
}

__global__ void AdamStepKernel(OptimizerStepScalars s, float* __restrict__ p,
                               const float* __restrict__ g, float* __restrict__ m,
                               float* __restrict__ v, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { AdamUpdate(p[i], g[i], m[i], v[i], s); }
}

__global__ void RmspropStepKernel(OptimizerStepScalars s, float* __restrict__ p,
                                  const float* __restrict__ g, float* __restrict__ v,
                                  float* __restrict__ buf, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    RmspropUpdate(p[i], g[i], v[i], buf != nullptr ? buf + i : nullptr, s);
  }
}

}  // namespace

void LaunchSgdStep(const OptimizerStepScalars& scalars, float* p, const float* g,
                   float* momentum_buffer, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  SgdStepKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(scalars, p, g, momentum_buffer, n);
}

void LaunchAdamStep(const OptimizerStepScalars& scalars, float* p, const float* g, float* exp_avg,
                    float* exp_avg_sq, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  AdamStepKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(scalars, p, g, exp_avg, exp_avg_sq,
                                                                n);
}

void LaunchRmspropStep(const OptimizerStepScalars& scalars, float* p, const float* g,
                       float* square_avg, float* momentum_buffer, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  RmspropStepKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(scalars, p, g, square_avg,
                                                                   momentum_buffer, n);
}

}  // namespace replicad
