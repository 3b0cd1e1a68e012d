// replicad.OptimizerStep on the CPU backend (training_ops.h): the update of
// one parameter and its state, in place, by the loop the host Optimizer runs
// (UpdateParameterOnHost). The host Optimizer does not need it for CPU slots;
// it is what an optimizer on a device whose memory is not the host's runs
// when that device's kernels are the CPU's (the device-memory stand-ins that
// test GPU paths without a GPU).

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
  OptimizerStepKernel(std::string label, const OptimizerConfig& config, int64_t n)
      : label_(std::move(label)),
        config_(config),
        index_(OptimizerStateIndexOf(config.kind, config.momentum)),
        n_(n) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const absl::StatusOr<int64_t> t = OptimizerUpdateNumber(run, label_);
    if (!t.ok()) return t.status();
    // The state outputs follow P in OptimizerStateNames' order.
    UpdateParameterOnHost(index_, MakeOptimizerStepScalars(config_, *t),
                          static_cast<float*>(outputs[0]), static_cast<const float*>(inputs[0]),
                          reinterpret_cast<float* const*>(outputs + 1), n_);
    return absl::OkStatus();
  }

 private:
  std::string label_;
  OptimizerConfig config_;
  OptimizerStateIndex index_;
  int64_t n_;
};

// replicad.OptimizerDryRun: the host's own dry run (FirstNonFiniteUpdateOnHost)
// on the inputs, so a stand-in device refuses exactly what the host does.
class OptimizerDryRunKernel : public Kernel {
 public:
  OptimizerDryRunKernel(std::string label, const OptimizerConfig& config, int64_t n)
      : label_(std::move(label)),
        config_(config),
        index_(OptimizerStateIndexOf(config.kind, config.momentum)),
        n_(n) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const absl::StatusOr<int64_t> t = OptimizerUpdateNumber(run, label_);
    if (!t.ok()) return t.status();
    float after = 0;
    const int64_t bad = FirstNonFiniteUpdateOnHost(
        index_, MakeOptimizerStepScalars(config_, *t), static_cast<const float*>(inputs[1]),
        static_cast<const float*>(inputs[0]), reinterpret_cast<const float* const*>(inputs + 2), n_,
        &after);
    *static_cast<float*>(outputs[0]) = bad < 0 ? 1.0f : 0.0f;
    return absl::OkStatus();
  }

 private:
  std::string label_;
  OptimizerConfig config_;
  OptimizerStateIndex index_;
  int64_t n_;
};

}  // namespace

KernelOrStatus MakeOptimizerDryRunKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerConfig config, ParseOptimizerStep(spec));
  return std::make_unique<OptimizerDryRunKernel>(NodeLabel(spec), config,
                                                 NumElements(spec.inputs[0]->shape));
}

KernelOrStatus MakeOptimizerStepKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(OptimizerConfig config, ParseOptimizerStep(spec));
  return std::make_unique<OptimizerStepKernel>(NodeLabel(spec), config,
                                               NumElements(spec.inputs[0]->shape));
}

}  // namespace replicad
