#include <limits>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/fused_post_ops.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/non_finite.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/softmax_attributes.h"

namespace replicad {

using dnnl::memory;

// Relu is elementwise, so any shape runs as one flat vector; a clamp of
// ours, which keeps NaN (oneDNN's relu makes it 0, see activation_pass.h).
KernelOrStatus MakeReluKernel(const KernelSpec& spec, CpuKernelContext&) {
  return MakeActivationStepKernel(
      ActivationStep{ActivationPass::kClip, 0.0f, std::numeric_limits<float>::infinity()},
      NumElements(spec.outputs[0].shape));
}

// Both ONNX softmax forms (2-D coercion before opset 13, one axis from 13)
// are a softmax over the middle dim of [outer, axis_size, inner].
KernelOrStatus MakeSoftmaxKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(SoftmaxLayout layout, ParseSoftmaxLayout(spec));
  const memory::desc data({layout.outer, layout.axis_size, layout.inner}, memory::data_type::f32,
                          memory::format_tag::abc);
  const dnnl::softmax_forward::desc desc(dnnl::prop_kind::forward_inference, data, 1);
  const dnnl::softmax_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::softmax_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, data, 0);
  primitive.BindOutput(DNNL_ARG_DST, data, 0);
  return WithNaNRows(
      std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive)),
      layout.outer, layout.axis_size, layout.inner);
}

}  // namespace replicad
