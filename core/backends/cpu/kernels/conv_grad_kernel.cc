// Convolution backward on oneDNN: the data gradient (dX) and the filter and
// bias gradients (dW, dB), both on row-major tensors. Training graphs feed
// the weights as inputs (they change every step), so nothing is reordered
// ahead of time; oneDNN's backward implementations take plain layouts.

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using dnnl::memory;

// What both gradients need: the forward convolution's descriptors, as its
// backward primitives require the forward primitive as a hint.
struct ConvGeometry {
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, padding_l, padding_r;

  dnnl::convolution_forward::primitive_desc ForwardHint(const dnnl::engine& engine) const {
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                               dnnl::algorithm::convolution_direct, src, weights,
                                               bias, dst, strides, dilates, padding_l, padding_r);
    return dnnl::convolution_forward::primitive_desc(desc, engine);
  }
};

absl::StatusOr<ConvGeometry> Geometry(const KernelSpec& spec) {
  const KernelSpec forward = ForwardInputs(spec, 2);
  REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(forward));
  const memory::data_type f32 = memory::data_type::f32;
  const Shape& x = spec.inputs[0]->shape;
  const Shape& w = spec.inputs[1]->shape;
  const Shape& y = spec.inputs[2]->shape;
  ConvGeometry g;
  g.src = memory::desc(memory::dims(x.begin(), x.end()), f32, memory::format_tag::nchw);
  g.dst = memory::desc(memory::dims(y.begin(), y.end()), f32, memory::format_tag::nchw);
  // ONNX's [M, C/group, kH, kW] is oneDNN's goihw byte for byte (see conv_kernel.cc).
  g.weights = conv.group == 1
                  ? memory::desc(memory::dims(w.begin(), w.end()), f32, memory::format_tag::oihw)
                  : memory::desc({conv.group, w[0] / conv.group, w[1], w[2], w[3]}, f32,
                                 memory::format_tag::goihw);
  g.bias = memory::desc({conv.out_channels}, f32, memory::format_tag::x);
  const Window2d& window = conv.window;
  g.strides = {window.strides[0], window.strides[1]};
  g.dilates = {window.dilations[0] - 1, window.dilations[1] - 1};
  g.padding_l = {window.pads_begin[0], window.pads_begin[1]};
  g.padding_r = {window.pads_end[0], window.pads_end[1]};
  return g;
}

}  // namespace

KernelOrStatus MakeConvGradDataKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConvGeometry g, Geometry(spec));
  const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, g.src,
                                                   g.weights, g.dst, g.strides, g.dilates,
                                                   g.padding_l, g.padding_r);
  const dnnl::convolution_backward_data::primitive_desc pd(
      desc, UserScratchpadAttr(), context.engine, g.ForwardHint(context.engine));
  BoundPrimitive primitive(context, pd, dnnl::convolution_backward_data(pd));
  primitive.BindInput(DNNL_ARG_WEIGHTS, g.weights, 1);
  primitive.BindInput(DNNL_ARG_DIFF_DST, g.dst, 2);
  primitive.BindOutput(DNNL_ARG_DIFF_SRC, g.src, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

KernelOrStatus MakeConvGradFilterKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConvGeometry g, Geometry(spec));
  const dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, g.src,
                                                      g.weights, g.bias, g.dst, g.strides,
                                                      g.dilates, g.padding_l, g.padding_r);
  const dnnl::convolution_backward_weights::primitive_desc pd(
      desc, UserScratchpadAttr(), context.engine, g.ForwardHint(context.engine));
  BoundPrimitive primitive(context, pd, dnnl::convolution_backward_weights(pd));
  primitive.BindInput(DNNL_ARG_SRC, g.src, 0);
  primitive.BindInput(DNNL_ARG_DIFF_DST, g.dst, 2);
  primitive.BindOutput(DNNL_ARG_DIFF_WEIGHTS, g.weights, 0);
  primitive.BindOutput(DNNL_ARG_DIFF_BIAS, g.bias, 1);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace replicad
