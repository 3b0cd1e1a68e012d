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

__global__ void DryRunResetKernel(float* ok) { *ok = 1.0f; }

// The step kernels' rules on register copies of the element and its state;
// every write to `ok` is the same 0.
__global__ void OptimizerDryRunKernel(OptimizerStepScalars s, const float* __restrict__ p,
                                      const float* __restrict__ g, OptimizerDryRunState state,
                                      int64_t n, float* ok) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    float after = p[i];
    float buf = state.momentum_buffer != nullptr ? state.momentum_buffer[i] : 0.0f;
    float* const buf_or_null = state.momentum_buffer != nullptr ? &buf : nullptr;
    switch (s.kind) {
      case OptimizerConfig::Kind::kSgd:
        SgdUpdate(after, g[i], buf_or_null, s);
        break;
      case OptimizerConfig::Kind::kAdam: {
        float m = state.exp_avg[i], v = state.exp_avg_sq[i];
        AdamUpdate(after, g[i], m, v, s);
        break;
      }
      case OptimizerConfig::Kind::kRmsprop: {
        float v = state.square_avg[i];
        RmspropUpdate(after, g[i], v, buf_or_null, s);
        break;
      }
    }
    if (!isfinite(after)) *ok = 0.0f;
  }
}

}  // namespace

void LaunchOptimizerDryRun(const OptimizerStepScalars& scalars, const float* p, const float* g,
                           const OptimizerDryRunState& state, int64_t n, float* ok,
                           cudaStream_t stream) {
  DryRunResetKernel<<<1, 1, 0, stream>>>(ok);
  if (n == 0) return;
  OptimizerDryRunKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(scalars, p, g, state, n, ok);
}

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
