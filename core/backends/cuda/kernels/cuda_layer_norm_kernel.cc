#include <memory>

#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/backends/cuda/kernels/layer_norm_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/group_norm_attributes.h"
#include "core/ops/layer_norm_attributes.h"

namespace replicad {
namespace {

class LayerNormKernel : public Kernel {
 public:
  LayerNormKernel(const CudaKernelContext& context, LayerNormLayout layout, size_t outputs)
      : context_(context), layout_(layout), outputs_(outputs) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchLayerNorm(static_cast<const float*>(inputs[0]), static_cast<const float*>(inputs[1]),
                    layout_.has_bias ? static_cast<const float*>(inputs[2]) : nullptr,
                    static_cast<float*>(outputs[0]),
                    outputs_ > 1 ? static_cast<float*>(outputs[1]) : nullptr,
                    outputs_ > 2 ? static_cast<float*>(outputs[2]) : nullptr, layout_.rows,
                    layout_.cols, layout_.epsilon, context_.stream);
    return LastLaunchStatus(context_.device, "LayerNormKernel");
  }

 private:
  const CudaKernelContext& context_;
  LayerNormLayout layout_;
  size_t outputs_;
};

}  // namespace

KernelOrStatus MakeCudaLayerNormalizationKernel(const KernelSpec& spec,
                                                CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(LayerNormLayout layout, ParseLayerNormalization(spec));
  return std::make_unique<LayerNormKernel>(context, layout, spec.outputs.size());
}

}  // namespace replicad

namespace replicad {

KernelOrStatus MakeCudaGroupNormalizationKernel(const KernelSpec& spec,
                                                CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GroupNormLayout layout, ParseGroupNormalization(spec));
  return std::make_unique<LaunchKernel>(
      context, "GroupNormKernel",
      [layout](const void* const* inputs, void* const* outputs, cudaStream_t stream) {
        LaunchGroupNorm(static_cast<const float*>(inputs[0]), static_cast<const float*>(inputs[1]),
                        static_cast<const float*>(inputs[2]), static_cast<float*>(outputs[0]),
                        layout.batch, layout.channels, layout.groups, layout.spatial,
                        layout.affine_per_group, layout.epsilon, stream);
      });
}

}  // namespace replicad
