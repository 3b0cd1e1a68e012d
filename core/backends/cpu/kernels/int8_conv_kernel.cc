// QLinearConv and ConvInteger as oneDNN's int8 convolution (VNNI, or AMX
// tiles where the CPU has them) where the form allows it: int8 weights known
// at load with zero points of 0 (onnxruntime.quantization's symmetric
// weights) and every other scale and zero point known at load. Elsewhere
// the exact int32 kernel of integer_product_kernels.cc runs. X arrives
// row-major and is reordered into the layout oneDNN picks for it (channels
// last), Y is reordered back out: int8 copies, a quarter of a float32
// convolution's.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/integer_product.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/quantize_attributes.h"

namespace replicad {
namespace {

using dnnl::memory;

// One primitive between two optional reorders: X into the kernel's buffer
// in the primitive's layout, Y out of its buffer into row-major. Where the
// plan lets it (a QLinearConv reading the output), Y stays in the
// primitive's layout and the reader takes it as it is.
class ReorderedConvKernel : public Kernel {
 public:
  ReorderedConvKernel(CpuKernelContext& context, std::string node,
                      std::optional<BoundPrimitive> src_reorder, dnnl::memory src,
                      BoundPrimitive conv, std::optional<BoundPrimitive> dst_reorder,
                      dnnl::memory dst)
      : context_(context),
        node_(std::move(node)),
        src_reorder_(std::move(src_reorder)),
        src_(std::move(src)),
        conv_(std::move(conv)),
        dst_reorder_(std::move(dst_reorder)),
        dst_(std::move(dst)) {}

  size_t workspace_bytes() const override { return SrcBytes() + DstBytes(); }
  void SetNativeOutput(const memory::desc& layout) {
    native_layout_ = SerializeDesc(layout);
    native_bytes_ = layout.get_size();
  }
  std::string native_output_layout() const override { return native_layout_; }
  size_t native_output_bytes() const override { return native_bytes_; }
  void SetWorkspace(void* workspace) override {
    char* base = static_cast<char*>(workspace);
    if (src_) src_.set_data_handle(base);
    if (dst_) dst_.set_data_handle(base + SrcBytes());
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (src_reorder_) REPLICAD_RETURN_IF_ERROR(src_reorder_->Execute(inputs, outputs, node_));
    REPLICAD_RETURN_IF_ERROR(conv_.Execute(inputs, outputs, node_));
    if (dst_reorder_) REPLICAD_RETURN_IF_ERROR(dst_reorder_->Execute(inputs, outputs, node_));
    return WaitStream(context_, node_);
  }

 private:
  static constexpr size_t kAlignment = 64;
  size_t SrcBytes() const {
    return src_ ? (src_.get_desc().get_size() + kAlignment - 1) / kAlignment * kAlignment : 0;
  }
  size_t DstBytes() const { return dst_ ? dst_.get_desc().get_size() : 0; }

  CpuKernelContext& context_;
  std::string node_;
  std::optional<BoundPrimitive> src_reorder_;
  dnnl::memory src_;
  BoundPrimitive conv_;
  std::optional<BoundPrimitive> dst_reorder_;
  dnnl::memory dst_;
  std::string native_layout_;
  size_t native_bytes_ = 0;
};

// The oneDNN kernel, or nullopt where the form or the CPU does not allow it.
std::optional<std::unique_ptr<Kernel>> OneDnnInt8Conv(const KernelSpec& spec,
                                                      CpuKernelContext& context,
                                                      const IntegerConv& conv) {
  const IntegerProduct& product = conv.product;
  const IntegerProductInputs& at = product.inputs;
  const Tensor* weights = ConstantInput(spec, at.b);
  if (product.b != DType::kInt8 || weights == nullptr) return std::nullopt;
  if (HasInput(spec, at.b_zero_point)) {
    const Tensor* zero_points = ConstantInput(spec, at.b_zero_point);
    if (zero_points == nullptr || !AllZero(*zero_points)) return std::nullopt;
  }
  std::vector<int> parameters = {at.a_zero_point};
  if (product.requantized) {
    parameters.insert(parameters.end(), {at.a_scale, at.b_scale, at.y_scale, at.y_zero_point});
  }
  for (int index : parameters) {
    if (HasInput(spec, index) && ConstantInput(spec, index) == nullptr) return std::nullopt;
  }
  // Every parameter is known: read them as a run would.
  std::vector<const void*> inputs(spec.inputs.size(), nullptr);
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (const Tensor* value = ConstantInput(spec, static_cast<int>(i))) {
      inputs[i] = value->raw_data();
    }
  }
  ProductParameters values(spec, product, conv.conv.out_channels);
  values.Read(product, inputs.data());

  using tag = memory::format_tag;
  const Shape& x = spec.inputs[at.a]->shape;
  const Shape& w = spec.inputs[at.b]->shape;
  const Shape& y = spec.outputs[0].shape;
  const memory::dims src_dims(x.begin(), x.end());
  const memory::dims dst_dims(y.begin(), y.end());
  memory::dims weight_dims(w.begin(), w.end());
  const int64_t group = conv.conv.group;
  if (group != 1) {
    weight_dims[0] /= group;
    weight_dims.insert(weight_dims.begin(), group);
  }
  const memory::desc plain_src(src_dims, DnnlDataType(product.a), tag::nchw);
  const memory::desc plain_dst(dst_dims, DnnlDataType(product.output), tag::nchw);
  const memory::desc plain_weights(weight_dims, memory::data_type::s8,
                                   group == 1 ? tag::oihw : tag::goihw);
  const bool has_bias = HasInput(spec, at.bias);
  const memory::desc bias =
      has_bias ? memory::desc({conv.conv.out_channels}, memory::data_type::s32, tag::x)
               : memory::desc();

  dnnl::primitive_attr attr = UserScratchpadAttr();
  if (product.requantized) {
    const bool per_channel = values.b_scale_per_channel;
    attr.set_output_scales(
        per_channel ? 1 << 1 : 0,
        per_channel ? values.multiplier : std::vector<float>{values.multiplier[0]});
    if (values.y_zero_point != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {values.y_zero_point});
  }
  if (values.a_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {values.a_zero_point});

  const Window2d& window = conv.conv.window;
  const memory::dims strides = {window.strides[0], window.strides[1]};
  // oneDNN counts dilation from 0 (dense), ONNX from 1.
  const memory::dims dilates = {window.dilations[0] - 1, window.dilations[1] - 1};
  const memory::dims padding_l = {window.pads_begin[0], window.pads_begin[1]};
  const memory::dims padding_r = {window.pads_end[0], window.pads_end[1]};
  std::optional<dnnl::convolution_forward::primitive_desc> pd;
  try {
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(src_dims, DnnlDataType(product.a), tag::any),
        memory::desc(weight_dims, memory::data_type::s8, tag::any), bias,
        memory::desc(dst_dims, DnnlDataType(product.output), tag::any), strides, dilates, padding_l,
        padding_r);
    pd.emplace(desc, attr, context.engine);
  } catch (const dnnl::error&) {
    return std::nullopt;  // No implementation takes this form with these attributes.
  }
  if (IsReference(*pd)) return std::nullopt;

  const std::string node = NodeLabel(spec);
  BoundPrimitive primitive(context, *pd, dnnl::convolution_forward(*pd));
  // X arrives row-major, or in the layout the QLinearConv writing it kept.
  const memory::desc given_src = GivenLayout(spec, at.a, plain_src);
  std::optional<BoundPrimitive> src_reorder;
  dnnl::memory src;
  if (SameBytes(pd->src_desc(), given_src)) {
    primitive.BindInput(DNNL_ARG_SRC, pd->src_desc(), at.a);
  } else {
    src = dnnl::memory(pd->src_desc(), context.engine, DNNL_MEMORY_NONE);
    src_reorder.emplace(Reorder(context, given_src, pd->src_desc()));
    src_reorder->BindInput(DNNL_ARG_FROM, given_src, at.a);
    src_reorder->BindFixed(DNNL_ARG_TO, src);
    primitive.BindFixed(DNNL_ARG_SRC, src);
  }
  primitive.BindFixed(DNNL_ARG_WEIGHTS,
                      PreparedWeights(context, *weights, plain_weights, pd->weights_desc()));
  if (has_bias) primitive.BindInput(DNNL_ARG_BIAS, bias, at.bias);
  std::optional<BoundPrimitive> dst_reorder;
  dnnl::memory dst;
  const bool native_output = spec.native_output && !SameBytes(pd->dst_desc(), plain_dst);
  if (SameBytes(pd->dst_desc(), plain_dst) || native_output) {
    primitive.BindOutput(DNNL_ARG_DST, pd->dst_desc(), 0);
  } else {
    dst = dnnl::memory(pd->dst_desc(), context.engine, DNNL_MEMORY_NONE);
    primitive.BindFixed(DNNL_ARG_DST, dst);
    dst_reorder.emplace(Reorder(context, pd->dst_desc(), plain_dst));
    dst_reorder->BindFixed(DNNL_ARG_FROM, dst);
    dst_reorder->BindOutput(DNNL_ARG_TO, plain_dst, 0);
  }
  auto kernel = std::make_unique<ReorderedConvKernel>(context, node, std::move(src_reorder),
                                                      std::move(src), std::move(primitive),
                                                      std::move(dst_reorder), std::move(dst));
  if (native_output) kernel->SetNativeOutput(pd->dst_desc());
  return kernel;
}

KernelOrStatus MakeExactKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(IntegerConv conv, ParseIntegerConv(spec));
  return MakeExactIntegerConvKernel(spec, conv);
}

}  // namespace

KernelOrStatus MakeIntegerConvKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(IntegerConv conv, ParseIntegerConv(spec));
  std::optional<std::unique_ptr<Kernel>> fast = OneDnnInt8Conv(spec, context, conv);
  if (fast.has_value()) return std::move(*fast);
  // The exact kernel reads row-major X only (and writes row-major Y, which
  // a plan that offered a native layout then finds as it is).
  return HasNativeInputs(spec) ? WithRowMajorInputs(spec, context, MakeExactKernel)
                               : MakeExactKernel(spec, context);
}

}  // namespace replicad
