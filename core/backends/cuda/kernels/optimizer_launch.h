#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_OPTIMIZER_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_OPTIMIZER_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/optimizer_step.h"

namespace replicad {

// Internal to the CUDA kernels: launchers of replicad.OptimizerStep's update
// and of replicad.OptimizerDryRun (optimizer.cu) over several parameters at
// once, as torch.optim's multi-tensor (`foreach`) kernels do: one launch for
// up to kCapacity parameters, each element applying the shared rule of
// core/ops/optimizer_step.h with `scalars` (MakeOptimizerStepScalars), so the
// bits do not depend on how parameters are grouped. Same conventions as
// elementwise_launch.h: device pointers, enqueued on `stream`, nothing
// launched when every parameter is empty, errors read with LastLaunchStatus.

// The parameters of one launch, passed by value in the kernel's parameter
// space (kept under the 4 KB every architecture takes). Value is float for
// the update (P and the state are written in place) and const float for the
// dry run (nothing is). The state pointers are by role, null where the kind
// does not use one (SGD's momentum buffer is null when momentum == 0); G must
// not alias P or the state.
template <typename Value>
struct OptimizerTensors {
  static constexpr int kCapacity = 32;
  int count = 0;
  int64_t elements[kCapacity] = {};
  Value* p[kCapacity] = {};
  const float* g[kCapacity] = {};
  Value* momentum_buffer[kCapacity] = {};
  Value* exp_avg[kCapacity] = {};
  Value* exp_avg_sq[kCapacity] = {};
  Value* square_avg[kCapacity] = {};
};
using OptimizerUpdateTensors = OptimizerTensors<float>;
using OptimizerDryRunTensors = OptimizerTensors<const float>;

// One update of every parameter in `tensors`, in place.
void LaunchOptimizerStep(const OptimizerStepScalars& scalars, const OptimizerUpdateTensors& tensors,
                         cudaStream_t stream);

// Where the dry run writes parameter j's flag: a device float each.
struct OptimizerDryRunFlags {
  float* flag[OptimizerDryRunTensors::kCapacity] = {};
};

// *flags.flag[j] = 1, then 0 where an element of parameter j's update by the
// same rule, run on copies in registers, would not be finite; nothing else is
// written.
void LaunchOptimizerDryRun(const OptimizerStepScalars& scalars,
                           const OptimizerDryRunTensors& tensors, const OptimizerDryRunFlags& flags,
                           cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_OPTIMIZER_LAUNCH_H_
