#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {

using dnnl::memory;

KernelOrStatus MakeMaxPoolKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(spec));
  const Shape& x = spec.inputs[0]->shape;
  const Shape& y = spec.outputs[0].shape;
  const memory::desc src(memory::dims(x.begin(), x.end()), memory::data_type::f32,
                         memory::format_tag::nchw);
  const memory::desc dst(memory::dims(y.begin(), y.end()), memory::data_type::f32,
                         memory::format_tag::nchw);
  memory::dims padding_r(2);
  for (int i = 0; i < 2; ++i) {
    // oneDNN floors the output size; with ceil_mode the last window needs
    // extra right padding, which max pooling ignores.
    const int64_t dilated = (window.kernel[i] - 1) * window.dilations[i] + 1;
    padding_r[i] = std::max(window.pads_end[i], (window.output[i] - 1) * window.strides[i] +
                                                    dilated - x[2 + i] - window.pads_begin[i]);
  }
  const dnnl::pooling_v2_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, src, dst,
      {window.strides[0], window.strides[1]}, {window.kernel[0], window.kernel[1]},
      {window.dilations[0] - 1, window.dilations[1] - 1},
      {window.pads_begin[0], window.pads_begin[1]}, padding_r);
  const dnnl::pooling_v2_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::pooling_v2_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, src, 0);
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

// A mean reduction over every spatial dim, which covers any rank (oneDNN's
// pooling stops at 3 spatial dims).
KernelOrStatus MakeGlobalAveragePoolKernel(const KernelSpec& spec, CpuKernelContext& context) {
  // oneDNN rejects a reduction that reduces nothing; the mean of one element
  // is the element.
  if (spec.inputs[0]->shape == spec.outputs[0].shape) return MakeCopyKernel(spec, context);
  const memory::desc src = RowMajorDesc(spec.inputs[0]->shape, memory::data_type::f32);
  const memory::desc dst = RowMajorDesc(spec.outputs[0].shape, memory::data_type::f32);
  const dnnl::reduction::desc desc(dnnl::algorithm::reduction_mean, src, dst, 0.0f, 0.0f);
  const dnnl::reduction::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::reduction(pd));
  primitive.BindInput(DNNL_ARG_SRC, src, 0);
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace replicad
