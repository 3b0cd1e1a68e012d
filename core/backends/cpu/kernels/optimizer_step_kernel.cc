// replicad.OptimizerStep and replicad.OptimizerDryRun on the CPU backend
// (training_ops.h): the update of one parameter and its state, in place, by
// the loop the host Optimizer runs (UpdateParameterOnHost), and its dry run
// (FirstNonFiniteUpdateOnHost). The host Optimizer does not need them for
// CPU slots; they are what an optimizer on a device whose memory is not the
// host's runs when that device's kernels are the CPU's (the device-memory
// stand-ins that test GPU paths without a GPU).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/optimizer_step.h"
#include "core/ops/optimizer_step_attributes.h"

namespace replicad {
namespace {

class OptimizerStepKernel : public Kernel {
 public:
  explicit OptimizerStepKernel(OptimizerRule rule) : rule_(std::move(rule)) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    REPLICAD_ASSIGN_OR_RETURN(const OptimizerStepScalars scalars, rule_.ScalarsFor(run));
    // The state outputs follow P in OptimizerStateNames' order.
    UpdateParameterOnHost(rule_.index(), scalars, static_cast<float*>(outputs[0]),
                          static_cast<const float*>(inputs[0]),
                          reinterpret_cast<float* const*>(outputs + 1), rule_.elements());
    return absl::OkStatus();
  }

 private:
  OptimizerRule rule_;
};

// replicad.OptimizerDryRun: the host's own dry run (FirstNonFiniteUpdateOnHost)
// on the inputs, so a stand-in device refuses exactly what the host does.
class OptimizerDryRunKernel : public Kernel {
 public:
  explicit OptimizerDryRunKernel(OptimizerRule rule) : rule_(std::move(rule)) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    REPLICAD_ASSIGN_OR_RETURN(const OptimizerStepScalars scalars, rule_.ScalarsFor(run));
    float after = 0;
    const int64_t bad = FirstNonFiniteUpdateOnHost(
        rule_.index(), scalars, static_cast<const float*>(inputs[1]),
        static_cast<const float*>(inputs[0]), reinterpret_cast<const float* const*>(inputs + 2),
        rule_.elements(), &after);
    *static_cast<float*>(outputs[0]) = bad < 0 ? 1.0f : 0.0f;
    return absl::OkStatus();
  }

 private:
  OptimizerRule rule_;
};

}  // namespace

KernelOrStatus MakeOptimizerDryRunKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerRule rule, OptimizerRule::Parse(spec));
  return std::make_unique<OptimizerDryRunKernel>(std::move(rule));
}

KernelOrStatus MakeOptimizerStepKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerRule rule, OptimizerRule::Parse(spec));
  return std::make_unique<OptimizerStepKernel>(std::move(rule));
}

}  // namespace replicad
