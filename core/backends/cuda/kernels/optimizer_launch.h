#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_OPTIMIZER_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_OPTIMIZER_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/optimizer_step.h"

namespace replicad {

// Internal to the CUDA kernels: launchers of replicad.OptimizerStep's update
// (optimizer.cu), one thread per element applying the shared per-element rule
// of core/ops/optimizer_step.h with `scalars` (MakeOptimizerStepScalars). Same
// conventions as elementwise_launch.h: device pointers of n floats, enqueued
// on `stream`, nothing launched for n == 0, errors read with LastLaunchStatus.
// p and the state are updated in place; g must not alias any of them.

// `momentum_buffer` may be null only when scalars.momentum == 0.
void LaunchSgdStep(const OptimizerStepScalars& scalars, float* p, const float* g,
                   float* momentum_buffer, int64_t n, cudaStream_t stream);
void LaunchAdamStep(const OptimizerStepScalars& scalars, float* p, const float* g, float* exp_avg,
                    float* exp_avg_sq, int64_t n, cudaStream_t stream);
// `momentum_buffer` may be null only when scalars.momentum == 0.
void LaunchRmspropStep(const OptimizerStepScalars& scalars, float* p, const float* g,
                       float* square_avg, float* momentum_buffer, int64_t n, cudaStream_t stream);

// replicad.OptimizerDryRun: *ok = 1, then 0 where an element's update by
// the same rule, run on copies in registers, would not be finite; nothing
// else is written. The state tensors by role as for the steps (null where
// the kind does not use one).
struct OptimizerDryRunState {
  const float* momentum_buffer = nullptr;
  const float* exp_avg = nullptr;
  const float* exp_avg_sq = nullptr;
  const float* square_avg = nullptr;
};
void LaunchOptimizerDryRun(const OptimizerStepScalars& scalars, const float* p, const float* g,
                           const OptimizerDryRunState& state, int64_t n, float* ok,
                           cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_OPTIMIZER_LAUNCH_H_
