// replicad.AllFinite on the CPU (training_ops.h): one scan of X with the
// vectorized AnyNonFinite of the non-finite request checks.
#include <cstddef>
#include <memory>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/non_finite.h"

namespace replicad {
namespace {

class AllFiniteKernel : public Kernel {
 public:
  explicit AllFiniteKernel(size_t count) : count_(count) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    *static_cast<float*>(outputs[0]) =
        AnyNonFinite(static_cast<const float*>(inputs[0]), count_) ? 0.0f : 1.0f;
    return absl::OkStatus();
  }

 private:
  size_t count_;
};

}  // namespace

KernelOrStatus MakeAllFiniteKernel(const KernelSpec& spec, CpuKernelContext&) {
  return std::make_unique<AllFiniteKernel>(static_cast<size_t>(NumElements(spec.inputs[0]->shape)));
}

}  // namespace replicad
