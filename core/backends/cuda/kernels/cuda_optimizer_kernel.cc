// replicad.OptimizerStep on CUDA (training_ops.h): the update of one parameter
// and its state, in place, by the element rules the host Optimizer runs.

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

class OptimizerStepKernel : public Kernel {
 public:
  // Its launches carry the step (a replay would repeat the last one's).
  bool replayable() const override { return false; }
  OptimizerStepKernel(const CudaKernelContext& context, std::string label,
                      const OptimizerConfig& config, int64_t n)
      : context_(context),
        label_(std::move(label)),
        config_(config),
        index_(OptimizerStateIndexOf(config.kind, config.momentum)),
        n_(n) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const absl::StatusOr<int64_t> t = OptimizerUpdateNumber(run, label_);
    if (!t.ok()) return t.status();
    const OptimizerStepScalars scalars = MakeOptimizerStepScalars(config_, *t);
    const float* g = static_cast<const float*>(inputs[0]);
    float* p = static_cast<float*>(outputs[0]);
    // The state outputs follow P in OptimizerStateNames' order.
    auto state = [outputs](int index) {
      return index < 0 ? nullptr : static_cast<float*>(outputs[1 + index]);
    };
    switch (config_.kind) {
      case OptimizerConfig::Kind::kSgd:
        LaunchSgdStep(scalars, p, g, state(index_.momentum_buffer), n_, context_.stream);
        break;
      case OptimizerConfig::Kind::kAdam:
        LaunchAdamStep(scalars, p, g, state(index_.exp_avg), state(index_.exp_avg_sq), n_,
                       context_.stream);
        break;
      case OptimizerConfig::Kind::kRmsprop:
        LaunchRmspropStep(scalars, p, g, state(index_.square_avg), state(index_.momentum_buffer),
                          n_, context_.stream);
        break;
    }
    return LastLaunchStatus(context_.device, "OptimizerStepKernel");
  }

 private:
  const CudaKernelContext& context_;
  std::string label_;
  OptimizerConfig config_;
  OptimizerStateIndex index_;
  int64_t n_;
};

// Inputs G, P, then the state tensors in OptimizerStateNames' order; one
// flag out.
class OptimizerDryRunKernel : public Kernel {
 public:
  // Its launches carry the step, as the update's do.
  bool replayable() const override { return false; }
  OptimizerDryRunKernel(const CudaKernelContext& context, std::string label,
                        const OptimizerConfig& config, int64_t n)
      : context_(context),
        label_(std::move(label)),
        config_(config),
        index_(OptimizerStateIndexOf(config.kind, config.momentum)),
        n_(n) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const absl::StatusOr<int64_t> t = OptimizerUpdateNumber(run, label_);
    if (!t.ok()) return t.status();
    auto state = [inputs](int index) {
      return index < 0 ? nullptr : static_cast<const float*>(inputs[2 + index]);
    };
    OptimizerDryRunState roles;
    roles.momentum_buffer = state(index_.momentum_buffer);
    roles.exp_avg = state(index_.exp_avg);
    roles.exp_avg_sq = state(index_.exp_avg_sq);
    roles.square_avg = state(index_.square_avg);
    LaunchOptimizerDryRun(MakeOptimizerStepScalars(config_, *t),
                          static_cast<const float*>(inputs[1]),
                          static_cast<const float*>(inputs[0]), roles, n_,
                          static_cast<float*>(outputs[0]), context_.stream);
    return LastLaunchStatus(context_.device, "OptimizerDryRunKernel");
  }

 private:
  const CudaKernelContext& context_;
  std::string label_;
  OptimizerConfig config_;
  OptimizerStateIndex index_;
  int64_t n_;
};

}  // namespace

KernelOrStatus MakeCudaOptimizerDryRunKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerConfig config, ParseOptimizerStep(spec));
  return std::make_unique<OptimizerDryRunKernel>(context, NodeLabel(spec), config,
                                                 NumElements(spec.inputs[0]->shape));
}

KernelOrStatus MakeCudaOptimizerStepKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerConfig config, ParseOptimizerStep(spec));
  return std::make_unique<OptimizerStepKernel>(context, NodeLabel(spec), config,
                                               NumElements(spec.inputs[0]->shape));
}

}  // namespace replicad
