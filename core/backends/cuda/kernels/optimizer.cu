#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/optimizer_launch.h"
#include "core/ops/optimizer_step.h"

namespace replicad {
namespace {

// Each block updates one chunk of one parameter: parameter j owns blocks
// [first_block[j], first_block[j + 1]). A chunk of 4096 elements (16 per
// thread) keeps a small parameter (a batch norm's 64 scales) to one block
// and a large one spread over the whole GPU.
constexpr int64_t kElementsPerBlock = 4096;
constexpr int kCapacity = OptimizerUpdateTensors::kCapacity;

struct BlockPlan {
  int64_t first_block[kCapacity + 1] = {};
};

// The blocks of every parameter in order; the total is first_block[count].
template <typename Value>
BlockPlan PlanBlocks(const OptimizerTensors<Value>& tensors) {
  BlockPlan plan;
  int64_t blocks = 0;
  for (int j = 0; j < tensors.count; ++j) {
    plan.first_block[j] = blocks;
    blocks += (tensors.elements[j] + kElementsPerBlock - 1) / kElementsPerBlock;
  }
  plan.first_block[tensors.count] = blocks;
  return plan;
}

// Calls body(j, i) for each element i of this block's chunk of parameter j.
// The block's parameter is the last whose first block is at or before it
// (an empty parameter owns no block and is passed over).
template <typename Value, typename Body>
__device__ void ForEachElementOfBlock(const OptimizerTensors<Value>& tensors, const BlockPlan& plan,
                                      Body body) {
  const int64_t block = blockIdx.x;
  int j = 0;
  while (j + 1 < tensors.count && plan.first_block[j + 1] <= block) ++j;
  const int64_t begin = (block - plan.first_block[j]) * kElementsPerBlock;
  const int64_t end = min(begin + kElementsPerBlock, tensors.elements[j]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) body(j, i);
}

// The update of element i of parameter j with its state by reference: the
// parameter's own memory for the step, register copies for the dry run.
__device__ void UpdateElement(const OptimizerStepScalars& s, float& p, float g, float* buf,
                              float* m, float* v, float* square_avg) {
  switch (s.kind) {
    case OptimizerConfig::Kind::kSgd:
      SgdUpdate(p, g, buf, s);
      break;
    case OptimizerConfig::Kind::kAdam:
      AdamUpdate(p, g, *m, *v, s);
      break;
    case OptimizerConfig::Kind::kRmsprop:
      RmspropUpdate(p, g, *square_avg, buf, s);
      break;
  }
}

// The scalars and the parameters travel by value in the kernel's parameter
// space.
__global__ void OptimizerStepKernel(OptimizerStepScalars s, OptimizerUpdateTensors t,
                                    BlockPlan plan) {
  ForEachElementOfBlock(t, plan, [&](int j, int64_t i) {
    auto at = [i](float* state) { return state != nullptr ? state + i : nullptr; };
    UpdateElement(s, t.p[j][i], t.g[j][i], at(t.momentum_buffer[j]), at(t.exp_avg[j]),
                  at(t.exp_avg_sq[j]), at(t.square_avg[j]));
  });
}

__global__ void DryRunResetKernel(OptimizerDryRunFlags flags, int count) {
  if (threadIdx.x < count) *flags.flag[threadIdx.x] = 1.0f;
}

// The step kernel's rule on register copies of the element and its state;
// every write to a flag is the same 0.
__global__ void OptimizerDryRunKernel(OptimizerStepScalars s, OptimizerDryRunTensors t,
                                      BlockPlan plan, OptimizerDryRunFlags flags) {
  ForEachElementOfBlock(t, plan, [&](int j, int64_t i) {
    auto copy = [i](const float* state) { return state != nullptr ? state[i] : 0.0f; };
    float after = t.p[j][i];
    float buf = copy(t.momentum_buffer[j]);
    float m = copy(t.exp_avg[j]), v = copy(t.exp_avg_sq[j]), square_avg = copy(t.square_avg[j]);
    UpdateElement(s, after, t.g[j][i], t.momentum_buffer[j] != nullptr ? &buf : nullptr, &m, &v,
                  &square_avg);
    if (!isfinite(after)) *flags.flag[j] = 0.0f;
  });
}

}  // namespace

void LaunchOptimizerStep(const OptimizerStepScalars& scalars, const OptimizerUpdateTensors& tensors,
                         cudaStream_t stream) {
  const BlockPlan plan = PlanBlocks(tensors);
  const int64_t blocks = plan.first_block[tensors.count];
  if (blocks == 0) return;
  OptimizerStepKernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(
      scalars, tensors, plan);
}

void LaunchOptimizerDryRun(const OptimizerStepScalars& scalars,
                           const OptimizerDryRunTensors& tensors, const OptimizerDryRunFlags& flags,
                           cudaStream_t stream) {
  if (tensors.count == 0) return;
  DryRunResetKernel<<<1, kCapacity, 0, stream>>>(flags, tensors.count);
  const BlockPlan plan = PlanBlocks(tensors);
  const int64_t blocks = plan.first_block[tensors.count];
  if (blocks == 0) return;
  OptimizerDryRunKernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(
      scalars, tensors, plan, flags);
}

}  // namespace replicad
