#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/fused_post_ops.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {

using dnnl::memory;

// Plain NCHW/OIHW layouts keep Run free of reorders; oneDNN's blocked
// layouts (format_tag::any plus reorders of X and Y, weights reordered once
// here) are faster and are the next step for this kernel.
KernelOrStatus MakeConvKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(spec));
  const Window2d& window = conv.window;
  const Shape& x = spec.inputs[0]->shape;
  const Shape& w = spec.inputs[1]->shape;
  const bool has_bias = HasInput(spec, 2);
  const memory::data_type f32 = memory::data_type::f32;

  const memory::desc src(memory::dims(x.begin(), x.end()), f32, memory::format_tag::nchw);
  const memory::desc dst(memory::dims(spec.outputs[0].shape.begin(), spec.outputs[0].shape.end()),
                         f32, memory::format_tag::nchw);
  // ONNX's [M, C/group, kH, kW] is, byte for byte, oneDNN's grouped goihw
  // [group, M/group, C/group, kH, kW].
  const memory::desc weights =
      conv.group == 1
          ? memory::desc(memory::dims(w.begin(), w.end()), f32, memory::format_tag::oihw)
          : memory::desc({conv.group, w[0] / conv.group, w[1], w[2], w[3]}, f32,
                         memory::format_tag::goihw);
  const memory::desc bias =
      has_bias ? memory::desc({conv.out_channels}, f32, memory::format_tag::x) : memory::desc();

  // oneDNN counts dilation from 0 (dense), ONNX from 1.
  const memory::dims strides{window.strides[0], window.strides[1]};
  const memory::dims dilates{window.dilations[0] - 1, window.dilations[1] - 1};
  const memory::dims padding_l{window.pads_begin[0], window.pads_begin[1]};
  const memory::dims padding_r{window.pads_end[0], window.pads_end[1]};
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::convolution_direct, src, weights,
                                             bias, dst, strides, dilates, padding_l, padding_r);
  dnnl::primitive_attr attr = UserScratchpadAttr();
  dnnl::post_ops ops;
  REPLICAD_RETURN_IF_ERROR(AppendFusedActivation(spec, &ops));
  attr.set_post_ops(ops);
  const dnnl::convolution_forward::primitive_desc pd(desc, attr, context.engine);

  BoundPrimitive primitive(context, pd, dnnl::convolution_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, src, 0);
  primitive.BindInput(DNNL_ARG_WEIGHTS, weights, 1);
  if (has_bias) primitive.BindInput(DNNL_ARG_BIAS, bias, 2);
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace replicad
