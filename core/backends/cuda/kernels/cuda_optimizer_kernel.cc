// replicad.OptimizerStep and replicad.OptimizerDryRun on CUDA (training_ops.h):
// the update of each parameter and its state, in place, by the element rules
// the host Optimizer runs, and the same rules on copies for the dry run,
// as multi-tensor launches (optimizer_launch.h).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/optimizer_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/optimizer_step.h"
#include "core/ops/optimizer_step_attributes.h"

namespace replicad {
namespace {

// Parameter j's tensors by role into slot `slot` of a launch's list: P from
// `p`, the state from the pointers at `state` in OptimizerStateNames' order.
template <typename Value, typename Pointer>
void AddParameter(const OptimizerStateIndex& index, Value* p, const void* g, Pointer const* state,
                  int64_t elements, OptimizerTensors<Value>& list) {
  const int slot = list.count++;
  auto role = [state](int i) { return i < 0 ? nullptr : static_cast<Value*>(state[i]); };
  list.elements[slot] = elements;
  list.p[slot] = p;
  list.g[slot] = static_cast<const float*>(g);
  list.momentum_buffer[slot] = role(index.momentum_buffer);
  list.exp_avg[slot] = role(index.exp_avg);
  list.exp_avg_sq[slot] = role(index.exp_avg_sq);
  list.square_avg[slot] = role(index.square_avg);
}

// Inputs G_0..G_{k-1}; outputs P_j and its state for each j. One launch per
// OptimizerTensors::kCapacity parameters.
class OptimizerStepKernel : public Kernel {
 public:
  // Its launches carry the step (a replay would repeat the last one's).
  bool replayable() const override { return false; }
  OptimizerStepKernel(const CudaKernelContext& context, OptimizerRule rule)
      : context_(context), rule_(std::move(rule)) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    REPLICAD_ASSIGN_OR_RETURN(const OptimizerStepScalars scalars, rule_.ScalarsFor(run));
    const size_t per_parameter = 1 + rule_.state_count();
    OptimizerUpdateTensors list;
    for (size_t j = 0; j < rule_.parameters(); ++j) {
      void* const* own = outputs + j * per_parameter;
      AddParameter(rule_.index(), static_cast<float*>(own[0]), inputs[j], own + 1,
                   rule_.elements(j), list);
      if (list.count == OptimizerUpdateTensors::kCapacity || j + 1 == rule_.parameters()) {
        LaunchOptimizerStep(scalars, list, context_.stream);
        list.count = 0;
      }
    }
    return LastLaunchStatus(context_.device, "OptimizerStepKernel");
  }

 private:
  const CudaKernelContext& context_;
  OptimizerRule rule_;
};

// Inputs G_j, P_j and its state for each j; one flag out per parameter.
class OptimizerDryRunKernel : public Kernel {
 public:
  // Its launches carry the step, as the update's do.
  bool replayable() const override { return false; }
  OptimizerDryRunKernel(const CudaKernelContext& context, OptimizerRule rule)
      : context_(context), rule_(std::move(rule)) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    REPLICAD_ASSIGN_OR_RETURN(const OptimizerStepScalars scalars, rule_.ScalarsFor(run));
    const size_t per_parameter = 2 + rule_.state_count();
    OptimizerDryRunTensors list;
    OptimizerDryRunFlags flags;
    for (size_t j = 0; j < rule_.parameters(); ++j) {
      const void* const* own = inputs + j * per_parameter;
      flags.flag[list.count] = static_cast<float*>(outputs[j]);
      AddParameter(rule_.index(), static_cast<const float*>(own[1]), own[0], own + 2,
                   rule_.elements(j), list);
      if (list.count == OptimizerDryRunTensors::kCapacity || j + 1 == rule_.parameters()) {
        LaunchOptimizerDryRun(scalars, list, flags, context_.stream);
        list.count = 0;
      }
    }
    return LastLaunchStatus(context_.device, "OptimizerDryRunKernel");
  }

 private:
  const CudaKernelContext& context_;
  OptimizerRule rule_;
};

}  // namespace

KernelOrStatus MakeCudaOptimizerDryRunKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerRule rule, OptimizerRule::Parse(spec));
  return std::make_unique<OptimizerDryRunKernel>(context, std::move(rule));
}

KernelOrStatus MakeCudaOptimizerStepKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerRule rule, OptimizerRule::Parse(spec));
  return std::make_unique<OptimizerStepKernel>(context, std::move(rule));
}

}  // namespace replicad
