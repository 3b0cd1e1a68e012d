#include <algorithm>
#include <array>
#include <string>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_transpose_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using dnnl::memory;

// oneDNN requires padding_l >= 0 and padding_r > -stride, but ONNX's pads
// may be more negative when output_shape (or SAME_UPPER with a kernel
// smaller than the stride) asks for rows and columns that no input reaches.
// The primitive then computes only the region inputs reach into a buffer of
// its own (oneDNN's reference deconvolution mishandles a strided view of the
// output), and Run copies it to the output from row lead[0] and column
// lead[1] on, filling the border around it with the bias (or 0).
class BorderedDeconvKernel : public Kernel {
 public:
  BorderedDeconvKernel(CpuKernelContext& context, std::string node, BoundPrimitive primitive,
                       dnnl::memory region, Shape output, std::array<int64_t, 2> lead,
                       std::array<int64_t, 2> trail, bool has_bias)
      : context_(context),
        node_(std::move(node)),
        primitive_(std::move(primitive)),
        region_(static_cast<const float*>(region.get_data_handle())),
        output_(std::move(output)),
        lead_(lead),
        trail_(trail),
        has_bias_(has_bias) {
    primitive_.BindFixed(DNNL_ARG_DST, region);
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    absl::Status status = primitive_.Execute(inputs, outputs, node_);
    if (status.ok()) status = WaitStream(context_, node_);
    if (!status.ok()) return status;
    const float* bias = has_bias_ ? static_cast<const float*>(inputs[2]) : nullptr;
    const int64_t height = output_[2];
    const int64_t width = output_[3];
    const int64_t region_width = width - lead_[1] - trail_[1];
    const float* from = region_;
    for (int64_t plane = 0; plane < output_[0] * output_[1]; ++plane) {
      const float value = bias != nullptr ? bias[plane % output_[1]] : 0.0f;
      float* rows = static_cast<float*>(outputs[0]) + plane * height * width;
      for (int64_t h = 0; h < height; ++h) {
        float* row = rows + h * width;
        if (h < lead_[0] || h >= height - trail_[0]) {
          std::fill(row, row + width, value);
          continue;
        }
        std::fill(row, row + lead_[1], value);
        std::copy(from, from + region_width, row + lead_[1]);
        from += region_width;
        std::fill(row + width - trail_[1], row + width, value);
      }
    }
    return absl::OkStatus();
  }

 private:
  CpuKernelContext& context_;
  std::string node_;
  BoundPrimitive primitive_;  // Holds the region's memory.
  const float* region_;
  Shape output_;
  std::array<int64_t, 2> lead_;
  std::array<int64_t, 2> trail_;
  bool has_bias_;
};

// oneDNN's deconvolution reading X, W and B (where `bias` is not empty) as
// inputs 0, 1 and 2 in the layouts given; the caller binds the output.
BoundPrimitive BindDeconvolution(CpuKernelContext& context, const memory::desc& src,
                                 const memory::desc& weights, const memory::desc& bias,
                                 const memory::desc& dst, const memory::dims& strides,
                                 const memory::dims& dilates, const memory::dims& padding_l,
                                 const memory::dims& padding_r) {
  const dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::deconvolution_direct, src, weights,
                                               bias, dst, strides, dilates, padding_l, padding_r);
  const dnnl::deconvolution_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::deconvolution_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, src, 0);
  primitive.BindInput(DNNL_ARG_WEIGHTS, weights, 1);
  if (!bias.is_zero()) primitive.BindInput(DNNL_ARG_BIAS, bias, 2);
  return primitive;
}

// X [N, C, D, H, W]: oneDNN's deconvolution over ncdhw, W [C, M/group, kD,
// kH, kW] read as iodhw (giodhw grouped). Pads beyond oneDNN's limits (the
// 2-D kernel's border) are Unimplemented here.
KernelOrStatus MakeConvTranspose3dKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConvTranspose3dAttributes conv, ParseConvTranspose3dAttributes(spec));
  const Shape& x = spec.inputs[0]->shape;
  const Shape& w = spec.inputs[1]->shape;
  const Shape& y = spec.outputs[0].shape;
  const bool has_bias = HasInput(spec, 2);
  const memory::data_type f32 = memory::data_type::f32;
  memory::dims strides, dilates, padding_l, padding_r;
  for (int i = 0; i < 3; ++i) {
    const int64_t right = conv.pads_end[i] - conv.output_padding[i];
    if (conv.pads_begin[i] < 0 || right <= -conv.strides[i]) {
      return NodeUnimplemented(spec,
                               "a 3-D transposed convolution whose pads (from output_shape "
                               "or auto_pad) add output elements no input reaches");
    }
    strides.push_back(conv.strides[i]);
    dilates.push_back(conv.dilations[i] - 1);
    padding_l.push_back(conv.pads_begin[i]);
    padding_r.push_back(right);
  }
  const memory::desc src(memory::dims(x.begin(), x.end()), f32, memory::format_tag::ncdhw);
  const memory::desc dst(memory::dims(y.begin(), y.end()), f32, memory::format_tag::ncdhw);
  const memory::desc weights =
      conv.group == 1 ? memory::desc({w[1], w[0], w[2], w[3], w[4]}, f32, memory::format_tag::iodhw)
                      : memory::desc({conv.group, w[1], w[0] / conv.group, w[2], w[3], w[4]}, f32,
                                     memory::format_tag::giodhw);
  const memory::desc bias =
      has_bias ? memory::desc({conv.out_channels}, f32, memory::format_tag::x) : memory::desc();
  BoundPrimitive primitive =
      BindDeconvolution(context, src, weights, bias, dst, strides, dilates, padding_l, padding_r);
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace

// oneDNN's deconvolution with plain layouts, like the Conv kernel.
KernelOrStatus MakeConvTransposeKernel(const KernelSpec& spec, CpuKernelContext& context) {
  if (spec.inputs.size() > 1 && spec.inputs[0] && spec.inputs[0]->shape.size() == 5) {
    return MakeConvTranspose3dKernel(spec, context);
  }
  REPLICAD_ASSIGN_OR_RETURN(ConvTransposeAttributes conv, ParseConvTransposeAttributes(spec));
  const Shape& x = spec.inputs[0]->shape;
  const Shape& w = spec.inputs[1]->shape;
  const Shape& y = spec.outputs[0].shape;
  const bool has_bias = HasInput(spec, 2);
  const memory::data_type f32 = memory::data_type::f32;
  // output_padding adds rows at the end, which oneDNN expresses as less
  // right padding. Pads beyond oneDNN's limits become a border.
  std::array<int64_t, 2> padding_l{};
  std::array<int64_t, 2> padding_r{};
  std::array<int64_t, 2> lead{};
  std::array<int64_t, 2> trail{};
  for (int i = 0; i < 2; ++i) {
    lead[i] = std::max<int64_t>(-conv.pads_begin[i], 0);
    padding_l[i] = conv.pads_begin[i] + lead[i];
    const int64_t right = conv.pads_end[i] - conv.output_padding[i];
    trail[i] = right <= -conv.strides[i] ? -right : 0;
    padding_r[i] = right + trail[i];
  }
  const bool bordered = lead != std::array<int64_t, 2>{} || trail != std::array<int64_t, 2>{};
  // With a border, the primitive writes only the region inputs reach.
  const Shape region{y[0], y[1], y[2] - lead[0] - trail[0], y[3] - lead[1] - trail[1]};
  if (region[2] < 1 || region[3] < 1) {
    return NodeUnimplemented(spec,
                             "no input element reaches the output (its pads exceed the "
                             "transposed convolution's extent)");
  }

  const memory::desc src(memory::dims(x.begin(), x.end()), f32, memory::format_tag::nchw);
  const memory::desc dst(memory::dims(region.begin(), region.end()), f32, memory::format_tag::nchw);
  // ONNX's W [C, M/group, kH, kW] is, byte for byte, oneDNN's iohw for the
  // logical [M, C, kH, kW], and giohw for the grouped [group, M/group,
  // C/group, kH, kW].
  const memory::desc weights =
      conv.group == 1 ? memory::desc({w[1], w[0], w[2], w[3]}, f32, memory::format_tag::iohw)
                      : memory::desc({conv.group, w[1], w[0] / conv.group, w[2], w[3]}, f32,
                                     memory::format_tag::giohw);
  const memory::desc bias =
      has_bias ? memory::desc({conv.out_channels}, f32, memory::format_tag::x) : memory::desc();

  BoundPrimitive primitive =
      BindDeconvolution(context, src, weights, bias, dst, {conv.strides[0], conv.strides[1]},
                        {conv.dilations[0] - 1, conv.dilations[1] - 1},
                        {padding_l[0], padding_l[1]}, {padding_r[0], padding_r[1]});
  if (bordered) {
    return std::make_unique<BorderedDeconvKernel>(context, NodeLabel(spec), std::move(primitive),
                                                  dnnl::memory(dst, context.engine), y, lead, trail,
                                                  has_bias);
  }
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace replicad
