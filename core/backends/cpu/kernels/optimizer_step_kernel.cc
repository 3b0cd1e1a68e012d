// replicad.OptimizerStep and replicad.OptimizerDryRun on the CPU backend
// (training_ops.h): the update of each parameter and its state, in place, by
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
    // Parameter j's outputs: P_j, then its state in OptimizerStateNames' order.
    const size_t per_parameter = 1 + rule_.state_count();
    for (size_t j = 0; j < rule_.parameters(); ++j) {
      void* const* own = outputs + j * per_parameter;
      UpdateParameterOnHost(rule_.index(), scalars, static_cast<float*>(own[0]),
                            static_cast<const float*>(inputs[j]),
                            reinterpret_cast<float* const*>(own + 1), rule_.elements(j));
    }
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
    // Parameter j's inputs: G_j, P_j, then its state.
    const size_t per_parameter = 2 + rule_.state_count();
    for (size_t j = 0; j < rule_.parameters(); ++j) {
      const void* const* own = inputs + j * per_parameter;
      float after = 0;
      const int64_t bad = FirstNonFiniteUpdateOnHost(
          rule_.index(), scalars, static_cast<const float*>(own[1]),
          static_cast<const float*>(own[0]), reinterpret_cast<const float* const*>(own + 2),
          rule_.elements(j), &after);
      *static_cast<float*>(outputs[j]) = bad < 0 ? 1.0f : 0.0f;
    }
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
