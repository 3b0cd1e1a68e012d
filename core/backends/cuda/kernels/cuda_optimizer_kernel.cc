// replicad.OptimizerStep and replicad.OptimizerDryRun on CUDA (training_ops.h):
// the update of one parameter and its state, in place, by the element rules
// the host Optimizer runs, and the same rules on copies for the dry run.

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

// A kernel's state tensors by role, from the pointers after P (the step's
// outputs) or after G and P (the dry run's inputs), in OptimizerStateNames'
// order.
template <typename Pointer>
Pointer StateRole(Pointer const* state, int index) {
  return index < 0 ? nullptr : state[index];
}

class OptimizerStepKernel : public Kernel {
 public:
  // Its launches carry the step (a replay would repeat the last one's).
  bool replayable() const override { return false; }
  OptimizerStepKernel(const CudaKernelContext& context, OptimizerRule rule)
      : context_(context), rule_(std::move(rule)) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    REPLICAD_ASSIGN_OR_RETURN(const OptimizerStepScalars scalars, rule_.ScalarsFor(run));
    const float* g = static_cast<const float*>(inputs[0]);
    float* p = static_cast<float*>(outputs[0]);
    float* const* state = reinterpret_cast<float* const*>(outputs + 1);
    const OptimizerStateIndex& index = rule_.index();
    const int64_t n = rule_.elements();
    switch (rule_.config().kind) {
      case OptimizerConfig::Kind::kSgd:
        LaunchSgdStep(scalars, p, g, StateRole(state, index.momentum_buffer), n, context_.stream);
        break;
      case OptimizerConfig::Kind::kAdam:
        LaunchAdamStep(scalars, p, g, StateRole(state, index.exp_avg),
                       StateRole(state, index.exp_avg_sq), n, context_.stream);
        break;
      case OptimizerConfig::Kind::kRmsprop:
        LaunchRmspropStep(scalars, p, g, StateRole(state, index.square_avg),
                          StateRole(state, index.momentum_buffer), n, context_.stream);
        break;
    }
    return LastLaunchStatus(context_.device, "OptimizerStepKernel");
  }

 private:
  const CudaKernelContext& context_;
  OptimizerRule rule_;
};

// Inputs G, P, then the state tensors; one flag out.
class OptimizerDryRunKernel : public Kernel {
 public:
  // Its launches carry the step, as the update's do.
  bool replayable() const override { return false; }
  OptimizerDryRunKernel(const CudaKernelContext& context, OptimizerRule rule)
      : context_(context), rule_(std::move(rule)) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    REPLICAD_ASSIGN_OR_RETURN(const OptimizerStepScalars scalars, rule_.ScalarsFor(run));
    const float* const* state = reinterpret_cast<const float* const*>(inputs + 2);
    const OptimizerStateIndex& index = rule_.index();
    OptimizerDryRunState roles;
    roles.momentum_buffer = StateRole(state, index.momentum_buffer);
    roles.exp_avg = StateRole(state, index.exp_avg);
    roles.exp_avg_sq = StateRole(state, index.exp_avg_sq);
    roles.square_avg = StateRole(state, index.square_avg);
    LaunchOptimizerDryRun(scalars, static_cast<const float*>(inputs[1]),
                          static_cast<const float*>(inputs[0]), roles, rule_.elements(),
                          static_cast<float*>(outputs[0]), context_.stream);
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
