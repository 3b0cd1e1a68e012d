#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/non_finite.h"
#include "core/base/status_macros.h"
#include "core/ops/batch_norm_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/softmax_attributes.h"

namespace replicad {

using dnnl::memory;

// Inference batch normalization reads the statistics, scale and shift in
// place: with use_global_stats, use_scale and use_shift oneDNN takes each as
// its own [C] argument, so the model's tensors are bound as they are and
// nothing is prepared here.
KernelOrStatus MakeBatchNormalizationKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(BatchNormLayout layout, ParseBatchNormalization(spec));
  // [N, C, D1, ...] is row-major [N, C, prod(D), 1], so one 4-D form serves
  // every rank; 4-D nchw (unlike 3-D) has oneDNN's jit implementation.
  const memory::desc data({layout.batch, layout.channels, layout.spatial, 1},
                          memory::data_type::f32, memory::format_tag::nchw);
  const memory::desc per_channel({layout.channels}, memory::data_type::f32, memory::format_tag::x);
  const dnnl::batch_normalization_forward::desc desc(
      dnnl::prop_kind::forward_inference, data, layout.epsilon,
      dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
          dnnl::normalization_flags::use_shift);
  const dnnl::batch_normalization_forward::primitive_desc pd(desc, UserScratchpadAttr(),
                                                             context.engine);
  BoundPrimitive primitive(context, pd, dnnl::batch_normalization_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, data, 0);
  primitive.BindInput(DNNL_ARG_SCALE, per_channel, 1);
  primitive.BindInput(DNNL_ARG_SHIFT, per_channel, 2);
  primitive.BindInput(DNNL_ARG_MEAN, per_channel, 3);
  primitive.BindInput(DNNL_ARG_VARIANCE, per_channel, 4);
  primitive.BindOutput(DNNL_ARG_DST, data, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

// As Softmax: both ONNX forms are a log-softmax over the middle dim of
// [outer, axis_size, inner].
KernelOrStatus MakeLogSoftmaxKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(SoftmaxLayout layout, ParseSoftmaxLayout(spec));
  const memory::desc data({layout.outer, layout.axis_size, layout.inner}, memory::data_type::f32,
                          memory::format_tag::abc);
  const dnnl::logsoftmax_forward::desc desc(dnnl::prop_kind::forward_inference, data, 1);
  const dnnl::logsoftmax_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::logsoftmax_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, data, 0);
  primitive.BindOutput(DNNL_ARG_DST, data, 0);
  return WithNaNRows(
      std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive)),
      layout.outer, layout.axis_size, layout.inner);
}

}  // namespace replicad
