#include <cstring>
#include <vector>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/parallel_copy.h"
#include "core/base/status_macros.h"
#include "core/ops/constant_value.h"

namespace replicad {
namespace {

// Row-major data keeps its bytes under Identity, Flatten and Reshape, so the
// kernel is a copy (outputs never alias inputs), which the plan skips where
// the output can be a view of the input (joined_input_offsets).
class CopyKernel : public Kernel {
 public:
  CopyKernel(size_t bytes, size_t num_inputs) : bytes_(bytes), num_inputs_(num_inputs) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    CopyAcrossThreads(outputs[0], inputs[0], bytes_);
    return absl::OkStatus();
  }

  std::vector<size_t> joined_input_offsets() const override {
    return OutputIsInputZero(num_inputs_);
  }

 private:
  size_t bytes_;
  size_t num_inputs_;
};

// Writes a value held since the plan was made.
class ConstantKernel : public Kernel {
 public:
  explicit ConstantKernel(Tensor value) : value_(std::move(value)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (value_.byte_size() != 0) std::memcpy(outputs[0], value_.raw_data(), value_.byte_size());
    return absl::OkStatus();
  }

 private:
  Tensor value_;
};

}  // namespace

KernelOrStatus MakeCopyKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const TensorType& out = spec.outputs[0];
  return std::make_unique<CopyKernel>(
      static_cast<size_t>(NumElements(out.shape)) * DTypeSize(out.dtype), spec.inputs.size());
}

KernelOrStatus MakeConstantKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, ConstantValue(spec));
  return std::make_unique<ConstantKernel>(std::move(value));
}

}  // namespace replicad
