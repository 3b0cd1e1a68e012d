#include <omp.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "core/backends/cpu/kernels/activation_pass.h"
#include "core/backends/cpu/kernels/depthwise_parts.h"
#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/fused_post_ops.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/backends/cpu/kernels/non_finite.h"
#include "core/backends/cpu/kernels/owned_spec.h"
#include "core/backends/cpu/kernels/parallel_copy.h"
#include "core/backends/cpu/kernels/product_precision.h"
#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/fused_activation.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using dnnl::memory;
using ConvPd = dnnl::convolution_forward::primitive_desc;

// A convolution in the layouts oneDNN prefers for it (blocked channels): X
// is reordered in, Y reordered out, and the weights were reordered once when
// the kernel was made. The blocked convolution's speed pays for the two
// reorders on anything but tiny layers.
class BlockedConvKernel : public Kernel {
 public:
  // A part of `blocked_src` or `blocked_dst` that one of `convs` reads or
  // writes: re-pointed with the workspace.
  struct WorkspacePart {
    dnnl::memory memory;
    bool in_dst;
    size_t byte_offset;
  };

  // `convs` run one after the other: the whole convolution, or its channel
  // parts (depthwise_parts.h). `blocked_src` and `blocked_dst` (either may be
  // empty) get their memory from the plan's workspace.
  BlockedConvKernel(CpuKernelContext& context, std::string node,
                    std::optional<BoundPrimitive> src_reorder, std::vector<BoundPrimitive> convs,
                    std::optional<BoundPrimitive> dst_reorder, dnnl::memory blocked_src,
                    dnnl::memory blocked_dst, std::vector<WorkspacePart> workspace_parts,
                    std::optional<BoundPrimitive> addend_reorder, size_t addend_copy_bytes,
                    const ActivationStep& activation, size_t activation_elements,
                    bool bfloat16_output)
      : context_(context),
        node_(std::move(node)),
        src_reorder_(std::move(src_reorder)),
        addend_reorder_(std::move(addend_reorder)),
        addend_copy_bytes_(addend_copy_bytes),
        convs_(std::move(convs)),
        dst_reorder_(std::move(dst_reorder)),
        blocked_src_(std::move(blocked_src)),
        blocked_dst_(std::move(blocked_dst)),
        workspace_parts_(std::move(workspace_parts)),
        activation_(activation),
        activation_elements_(activation_elements),
        bfloat16_output_(bfloat16_output) {}

  size_t workspace_bytes() const override { return SrcBytes() + DstBytes(); }

  // The addend is copied byte for byte to where the convolution writes: the
  // output itself unless the convolution writes its own buffer first.
  int overwritable_input() const override {
    return addend_copy_bytes_ != 0 && !blocked_dst_ && !addend_reorder_ ? 3 : kNoInput;
  }

  // Set when the output is written in oneDNN's layout (no reorder out).
  void SetNativeOutput(const memory::desc& desc) {
    native_layout_ = SerializeDesc(desc);
    native_bytes_ = desc.get_size();
  }
  std::string native_output_layout() const override { return native_layout_; }
  size_t native_output_bytes() const override { return native_bytes_; }

  void SetWorkspace(void* workspace) override {
    char* base = static_cast<char*>(workspace);
    if (blocked_src_) blocked_src_.set_data_handle(base);
    if (blocked_dst_) blocked_dst_.set_data_handle(base + SrcBytes());
    for (WorkspacePart& part : workspace_parts_) {
      part.memory.set_data_handle(base + (part.in_dst ? SrcBytes() : 0) + part.byte_offset);
    }
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (src_reorder_) REPLICAD_RETURN_IF_ERROR(src_reorder_->Execute(inputs, outputs, node_));
    // A fused residual Add: the addend goes where the convolution writes,
    // and its sum post-op accumulates onto it.
    if (addend_reorder_) {
      REPLICAD_RETURN_IF_ERROR(addend_reorder_->Execute(inputs, outputs, node_));
    } else if (addend_copy_bytes_ != 0) {
      void* target = blocked_dst_ ? blocked_dst_.get_data_handle() : outputs[0];
      // The plan may have given the output the addend's own buffer.
      if (target != inputs[3]) CopyAcrossThreads(target, inputs[3], addend_copy_bytes_);
    }
    for (BoundPrimitive& conv : convs_) {
      REPLICAD_RETURN_IF_ERROR(conv.Execute(inputs, outputs, node_));
    }
    if (activation_.pass != ActivationPass::kNone) {
      REPLICAD_RETURN_IF_ERROR(WaitStream(context_, node_));
      void* written = blocked_dst_ ? blocked_dst_.get_data_handle() : outputs[0];
      if (bfloat16_output_) {
        RunActivationPassBFloat16(activation_, static_cast<uint16_t*>(written),
                                  activation_elements_);
      } else {
        RunActivationPass(activation_, static_cast<float*>(written), activation_elements_);
      }
    }
    if (dst_reorder_) REPLICAD_RETURN_IF_ERROR(dst_reorder_->Execute(inputs, outputs, node_));
    return WaitStream(context_, node_);
  }

 private:
  static constexpr size_t kAlignment = 64;
  size_t SrcBytes() const {
    return blocked_src_
               ? (blocked_src_.get_desc().get_size() + kAlignment - 1) / kAlignment * kAlignment
               : 0;
  }
  size_t DstBytes() const { return blocked_dst_ ? blocked_dst_.get_desc().get_size() : 0; }

  CpuKernelContext& context_;
  std::string node_;
  std::optional<BoundPrimitive> src_reorder_;
  std::optional<BoundPrimitive> addend_reorder_;
  size_t addend_copy_bytes_;  // Where the addend needs no reorder.
  std::vector<BoundPrimitive> convs_;
  std::optional<BoundPrimitive> dst_reorder_;
  dnnl::memory blocked_src_;
  dnnl::memory blocked_dst_;
  std::vector<WorkspacePart> workspace_parts_;
  // Run over the convolution's whole output, `activation_elements_` padding
  // included (SiLU and a clamp whose range holds 0 keep its zeros; a Clip
  // whose range excludes 0 writes its bound there, which later convolutions
  // multiply by zero weights), float32 or bfloat16 as it is written.
  ActivationStep activation_;
  size_t activation_elements_;
  bool bfloat16_output_;
  std::string native_layout_;
  size_t native_bytes_ = 0;
};

// Winograd F(4x4, 3x3) needs a dense 3x3 stride-1 single-group window. On
// resnet18's layers (oneDNN 2.6, AVX-512) it takes 40-55% of the direct
// convolution's time at batch 1 and 32; below 16 channels it can be slower.
bool WinogradPays(const ConvAttributes& conv, const Shape& weights) {
  const Window2d& window = conv.window;
  constexpr int64_t kMinChannels = 16;
  return conv.group == 1 && weights[2] == 3 && weights[3] == 3 && window.strides[0] == 1 &&
         window.strides[1] == 1 && window.dilations[0] == 1 && window.dilations[1] == 1 &&
         weights[0] >= kMinChannels && weights[1] >= kMinChannels;
}

// The primitive that computes a range of a convolution's channels, and
// where its arguments start in the whole convolution's buffers.
struct ConvPart {
  ConvPd pd;
  size_t src_offset = 0;
  size_t weights_offset = 0;
  size_t bias_offset = 0;
  size_t dst_offset = 0;
};

// Builds a direct convolution's descriptor from its source, weights, bias
// and destination descriptors.
using PartPdMaker = absl::FunctionRef<ConvPd(const memory::desc&, const memory::desc&,
                                             const memory::desc&, const memory::desc&)>;

// What `whole` runs as: its channel parts where it is a batch-1 depthwise
// convolution on oneDNN's AVX-512 kernel in 16-channel blocks that
// DepthwiseChannelParts cuts (and every part gets that kernel and those
// layouts too), else `whole` alone. The parts' arguments are the whole's
// buffers from a block boundary on: with batch 1, channel block b of an
// aBcd16b tensor starts at b x H x W x 16 floats, and of Goihw16g weights at
// b x kH x kW x 16.
std::vector<ConvPart> ConvParts(const ConvPd& whole, PartPdMaker make_part_pd) {
  const memory::dims src_dims = whole.src_desc().dims();
  const memory::dims dst_dims = whole.dst_desc().dims();
  const memory::dims weight_dims = whole.weights_desc().dims();
  std::vector<ConvPart> one{{whole}};
  const memory::data_type f32 = memory::data_type::f32;
  const auto blocked = [&](const memory::dims& dims) {
    return memory::desc(dims, f32, memory::format_tag::aBcd16b);
  };
  const bool depthwise = src_dims.size() == 4 && weight_dims.size() == 5 && weight_dims[1] == 1 &&
                         weight_dims[2] == 1 && weight_dims[0] == src_dims[1] &&
                         dst_dims[1] == src_dims[1];
  if (!depthwise || src_dims[0] != 1 ||
      std::string(whole.impl_info_str()) != "jit_dw:avx512_core" ||
      whole.src_desc() != blocked(src_dims) || whole.dst_desc() != blocked(dst_dims) ||
      whole.weights_desc() != memory::desc(weight_dims, f32, memory::format_tag::Goihw16g)) {
    return one;
  }
  const int64_t kernel_area = weight_dims[3] * weight_dims[4];
  // Kernels are made on the slot's thread: this is its team's size.
  const std::vector<ChannelRange> ranges = DepthwiseChannelParts(
      src_dims[1], dst_dims[2], dst_dims[3], kernel_area, omp_get_max_threads());
  if (ranges.size() == 1) return one;
  std::vector<ConvPart> parts;
  for (const ChannelRange& range : ranges) {
    const memory::dims part_src{1, range.count, src_dims[2], src_dims[3]};
    const memory::dims part_dst{1, range.count, dst_dims[2], dst_dims[3]};
    const memory::dims part_weights{range.count, 1, 1, weight_dims[3], weight_dims[4]};
    const memory::desc weights_layout(part_weights, f32, memory::format_tag::Goihw16g);
    try {
      ConvPd pd =
          make_part_pd(blocked(part_src), weights_layout,
                       memory::desc({range.count}, f32, memory::format_tag::x), blocked(part_dst));
      if (std::string(pd.impl_info_str()) != "jit_dw:avx512_core" ||
          pd.weights_desc() != weights_layout) {
        return one;
      }
      const size_t floats = sizeof(float);
      parts.push_back({std::move(pd),
                       static_cast<size_t>(range.begin * src_dims[2] * src_dims[3]) * floats,
                       static_cast<size_t>(range.begin * kernel_area) * floats,
                       static_cast<size_t>(range.begin) * floats,
                       static_cast<size_t>(range.begin * dst_dims[2] * dst_dims[3]) * floats});
    } catch (const dnnl::error&) {
      return one;
    }
  }
  return parts;
}

// The node's convolution in oneDNN's terms: row-major X and Y, W as ONNX
// stores it, and the window.
struct ConvDescs {
  bool has_bias = false;
  memory::dims src_dims;
  memory::dims dst_dims;
  memory::dims weight_dims;
  memory::desc src;
  memory::desc dst;
  memory::desc weights;
  memory::desc bias;  // Empty without B.
  memory::dims strides;
  memory::dims dilates;
  memory::dims padding_l;
  memory::dims padding_r;
};

// Row-major X and Y, W as ONNX stores it ([M, C/group, k...] is, byte for
// byte, oneDNN's grouped [group, M/group, C/group, k...]), for a window of
// any spatial rank (2: nchw, oihw; 3: ncdhw, oidhw).
ConvDescs DescribeWindowConv(const KernelSpec& spec, int64_t group, int64_t out_channels,
                             const WindowNd& window) {
  using tag = memory::format_tag;
  const bool three_d = window.strides.size() == 3;
  const Shape& x = spec.inputs[0]->shape;
  const Shape& w = spec.inputs[1]->shape;
  const memory::data_type f32 = memory::data_type::f32;
  ConvDescs descs;
  descs.has_bias = HasInput(spec, 2);
  descs.src_dims = memory::dims(x.begin(), x.end());
  descs.dst_dims = memory::dims(spec.outputs[0].shape.begin(), spec.outputs[0].shape.end());
  descs.src = memory::desc(descs.src_dims, f32, three_d ? tag::ncdhw : tag::nchw);
  descs.dst = memory::desc(descs.dst_dims, f32, three_d ? tag::ncdhw : tag::nchw);
  descs.weight_dims = memory::dims(w.begin(), w.end());
  if (group != 1) {
    descs.weight_dims[0] /= group;
    descs.weight_dims.insert(descs.weight_dims.begin(), group);
  }
  const tag weights =
      group == 1 ? (three_d ? tag::oidhw : tag::oihw) : (three_d ? tag::goidhw : tag::goihw);
  descs.weights = memory::desc(descs.weight_dims, f32, weights);
  descs.bias = descs.has_bias ? memory::desc({out_channels}, f32, tag::x) : memory::desc();
  for (size_t i = 0; i < window.strides.size(); ++i) {
    descs.strides.push_back(window.strides[i]);
    // oneDNN counts dilation from 0 (dense), ONNX from 1.
    descs.dilates.push_back(window.dilations[i] - 1);
    descs.padding_l.push_back(window.pads_begin[i]);
    descs.padding_r.push_back(window.pads_end[i]);
  }
  return descs;
}

ConvDescs DescribeConv(const KernelSpec& spec, const ConvAttributes& conv) {
  const Window2d& w = conv.window;
  const WindowNd window{{w.kernel[0], w.kernel[1]},       {w.strides[0], w.strides[1]},
                        {w.dilations[0], w.dilations[1]}, {w.pads_begin[0], w.pads_begin[1]},
                        {w.pads_end[0], w.pads_end[1]},   {w.output[0], w.output[1]}};
  return DescribeWindowConv(spec, conv.group, conv.out_channels, window);
}

ConvDescs DescribeConv3d(const KernelSpec& spec, const Conv3dAttributes& conv) {
  return DescribeWindowConv(spec, conv.group, conv.out_channels, conv.window);
}

// An inference convolution over `descs`' window with these layouts.
ConvPd MakeConvPd(CpuKernelContext& context, const ConvDescs& descs,
                  const dnnl::primitive_attr& attr, dnnl::algorithm algorithm,
                  const memory::desc& src, const memory::desc& weights, const memory::desc& bias,
                  const memory::desc& dst) {
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, src,
                                             weights, bias, dst, descs.strides, descs.dilates,
                                             descs.padding_l, descs.padding_r);
  return ConvPd(desc, attr, context.engine);
}

// X and Y in channel blocks of the vector width where ChannelBlockedLayout
// says so, else as oneDNN chooses; weights as it chooses. X and W are read
// as `product` (f32, or bf16 for a node computed in bfloat16: then X and Y
// channels-last, AMX's layout, where oneDNN has a kernel for the form, else
// its choice), Y is written as `dst` (f32, or bf16 in a chain of bf16
// convolutions, which then pass their values with no reorder between).
ConvPd BlockedLayoutPd(CpuKernelContext& context, const ConvDescs& descs, int64_t out_channels,
                       const dnnl::primitive_attr& attr, dnnl::algorithm algorithm,
                       memory::data_type product = memory::data_type::f32,
                       memory::data_type dst = memory::data_type::f32) {
  const memory::data_type f32 = memory::data_type::f32;
  const memory::desc any_weights(descs.weight_dims, product, memory::format_tag::any);
  const auto pd_for = [&](memory::format_tag src_tag, memory::format_tag dst_tag) {
    return MakeConvPd(context, descs, attr, algorithm,
                      memory::desc(descs.src_dims, product, src_tag), any_weights, descs.bias,
                      memory::desc(descs.dst_dims, dst, dst_tag));
  };
  const bool two_d = descs.src_dims.size() == 4;
  if (product != f32) {
    if (two_d) {
      try {
        ConvPd channels_last = pd_for(memory::format_tag::nhwc, memory::format_tag::nhwc);
        if (!IsReference(channels_last)) return channels_last;
      } catch (const dnnl::error&) {
        // No kernel takes channels-last for this form.
      }
    }
    return pd_for(memory::format_tag::any, memory::format_tag::any);
  }
  const memory::format_tag src_tag =
      two_d ? ChannelBlockedLayout(descs.src_dims[1]) : memory::format_tag::any;
  const memory::format_tag dst_tag =
      two_d ? ChannelBlockedLayout(out_channels) : memory::format_tag::any;
  if (src_tag != memory::format_tag::any || dst_tag != memory::format_tag::any) {
    try {
      ConvPd blocked = pd_for(src_tag, dst_tag);
      // Only the reference kernel takes blocks for some grouped forms
      // (regnet's groups of 8, 24 or 48 channels), 10-200x slower.
      if (!IsReference(blocked)) return blocked;
    } catch (const dnnl::error&) {
      // No implementation takes blocks for this form.
    }
  }
  return pd_for(memory::format_tag::any, memory::format_tag::any);
}

// Winograd where it pays and this CPU has it for the form, else direct
// (always for a bfloat16 product: oneDNN's Winograd is f32 only).
ConvPd ChooseBlockedPd(const KernelSpec& spec, CpuKernelContext& context,
                       const ConvAttributes& conv, const ConvDescs& descs,
                       const dnnl::primitive_attr& attr) {
  const memory::data_type product = ConvProductType(spec, conv.group, spec.inputs[1]->shape);
  if (product != memory::data_type::f32) {
    return BlockedLayoutPd(
        context, descs, conv.out_channels, attr, dnnl::algorithm::convolution_direct, product,
        ConvWritesBFloat16(spec) ? memory::data_type::bf16 : memory::data_type::f32);
  }
  if (context.winograd && WinogradPays(conv, spec.inputs[1]->shape)) {
    try {
      return BlockedLayoutPd(context, descs, conv.out_channels, attr,
                             dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error&) {
      // This CPU or form has no Winograd implementation: direct it is.
    }
  }
  return BlockedLayoutPd(context, descs, conv.out_channels, attr,
                         dnnl::algorithm::convolution_direct);
}

// What a BlockedConvKernel is made of, gathered step by step below.
struct BlockedConvPieces {
  std::optional<BoundPrimitive> src_reorder;
  std::vector<BoundPrimitive> convs;
  std::optional<BoundPrimitive> dst_reorder;
  dnnl::memory blocked_src;
  dnnl::memory blocked_dst;
  std::vector<BlockedConvKernel::WorkspacePart> workspace_parts;
  std::optional<BoundPrimitive> addend_reorder;
  size_t addend_copy_bytes = 0;
};

// X arrives row-major, or in the layout its producing convolution kept.
// Layouts that differ only in the strides of unit dims (a squeeze-
// excitation's [N, C, 1, 1]) need no reorder. True where X is reordered
// into the kernel's own buffer.
bool ReorderSrcIn(const KernelSpec& spec, CpuKernelContext& context, const ConvPd& pd,
                  const memory::desc& row_major_src, BlockedConvPieces* pieces) {
  const memory::desc given_src = GivenLayout(spec, 0, row_major_src);
  if (SameBytes(pd.src_desc(), given_src)) return false;
  pieces->blocked_src = dnnl::memory(pd.src_desc(), context.engine, DNNL_MEMORY_NONE);
  pieces->src_reorder.emplace(Reorder(context, given_src, pd.src_desc()));
  pieces->src_reorder->BindInput(DNNL_ARG_FROM, given_src, 0);
  pieces->src_reorder->BindFixed(DNNL_ARG_TO, pieces->blocked_src);
  return true;
}

// Y is written into the kernel's own buffer, then reordered out row-major.
void ReorderDstOut(CpuKernelContext& context, const ConvPd& pd, const memory::desc& row_major_dst,
                   BlockedConvPieces* pieces) {
  pieces->blocked_dst = dnnl::memory(pd.dst_desc(), context.engine, DNNL_MEMORY_NONE);
  pieces->dst_reorder.emplace(Reorder(context, pd.dst_desc(), row_major_dst));
  pieces->dst_reorder->BindFixed(DNNL_ARG_FROM, pieces->blocked_dst);
  pieces->dst_reorder->BindOutput(DNNL_ARG_TO, row_major_dst, 0);
}

// X or Y: the kernel's own buffer (re-pointed with the workspace), or the
// given input or output, from the part's offset.
void BindPartBuffer(CpuKernelContext& context, int arg, const memory::desc& desc, size_t offset,
                    bool own_buffer, bool is_dst, BoundPrimitive* primitive,
                    BlockedConvPieces* pieces) {
  if (own_buffer) {
    pieces->workspace_parts.push_back(
        {dnnl::memory(desc, context.engine, DNNL_MEMORY_NONE), is_dst, offset});
    primitive->BindFixed(arg, pieces->workspace_parts.back().memory);
  } else if (is_dst) {
    primitive->BindOutput(arg, desc, 0, offset);
  } else {
    primitive->BindInput(arg, desc, 0, offset);
  }
}

// Binds each of `parts`' primitives (made already, in `pieces->convs`).
void BindConvParts(CpuKernelContext& context, const std::vector<ConvPart>& parts,
                   const std::shared_ptr<const dnnl::memory>& blocked_weights, bool has_bias,
                   bool reorder_src, bool blocked_dst_buffer, BlockedConvPieces* pieces) {
  for (size_t i = 0; i < parts.size(); ++i) {
    const ConvPart& part = parts[i];
    BoundPrimitive& primitive = pieces->convs[i];
    BindPartBuffer(context, DNNL_ARG_SRC, part.pd.src_desc(), part.src_offset, reorder_src,
                   /*is_dst=*/false, &primitive, pieces);
    primitive.BindFixedPart(DNNL_ARG_WEIGHTS, blocked_weights, part.pd.weights_desc(),
                            part.weights_offset);
    if (has_bias) primitive.BindInput(DNNL_ARG_BIAS, part.pd.bias_desc(), 2, part.bias_offset);
    BindPartBuffer(context, DNNL_ARG_DST, part.pd.dst_desc(), part.dst_offset, blocked_dst_buffer,
                   /*is_dst=*/true, &primitive, pieces);
  }
}

// Where the convolution writes: its blocked buffer or Y. The addend arrives
// row-major or in the layout its producer kept (a residual block's input,
// which the block's first convolution also reads); in the convolution's own
// layout it is a plain copy, several times faster than oneDNN's reorder
// between equal layouts (simple:any).
void PlaceAddend(const KernelSpec& spec, CpuKernelContext& context, const ConvPd& pd,
                 const memory::desc& row_major_dst, BlockedConvPieces* pieces) {
  const memory::desc given_addend = GivenLayout(spec, 3, row_major_dst);
  if (SameBytes(given_addend, pd.dst_desc())) {
    pieces->addend_copy_bytes = pd.dst_desc().get_size();
    return;
  }
  pieces->addend_reorder.emplace(Reorder(context, given_addend, pd.dst_desc()));
  pieces->addend_reorder->BindInput(DNNL_ARG_FROM, given_addend, 3);
  if (pieces->blocked_dst) {
    pieces->addend_reorder->BindFixed(DNNL_ARG_TO, pieces->blocked_dst);
  } else {
    pieces->addend_reorder->BindOutput(DNNL_ARG_TO, pd.dst_desc(), 0);
  }
}

// With constant weights: X, W and Y in the layouts BlockedLayoutPd picks,
// with reorders at the edges of a run of such kernels.
KernelOrStatus BuildBlockedConvKernel(const KernelSpec& spec, CpuKernelContext& context,
                                      const ConvPd& pd, const ConvDescs& descs,
                                      const dnnl::primitive_attr& attr,
                                      const Tensor& constant_weights,
                                      const ActivationStep& activation) {
  // Weights: reordered once per process and layout (shared by every slot's plans).
  std::shared_ptr<const dnnl::memory> blocked_weights =
      PreparedWeights(context, constant_weights, descs.weights, pd.weights_desc());
  // A fused sum's post-op adds onto whichever range of Y a part writes.
  const std::vector<ConvPart> parts =
      ConvParts(pd, [&](const memory::desc& part_src, const memory::desc& part_weights,
                        const memory::desc& part_bias, const memory::desc& part_dst) {
        return MakeConvPd(context, descs, attr, dnnl::algorithm::convolution_direct, part_src,
                          part_weights, descs.has_bias ? part_bias : memory::desc(), part_dst);
      });
  BlockedConvPieces pieces;
  for (const ConvPart& part : parts) {
    pieces.convs.emplace_back(context, part.pd, dnnl::convolution_forward(part.pd));
  }
  const bool reorder_src = ReorderSrcIn(spec, context, pd, descs.src, &pieces);
  const bool row_major_dst = SameBytes(pd.dst_desc(), descs.dst);
  const bool native_output = spec.native_output && !row_major_dst;
  const bool blocked_dst_buffer = !native_output && !row_major_dst;
  if (blocked_dst_buffer) ReorderDstOut(context, pd, descs.dst, &pieces);
  BindConvParts(context, parts, blocked_weights, descs.has_bias, reorder_src, blocked_dst_buffer,
                &pieces);
  if (HasFusedSum(*spec.attributes)) PlaceAddend(spec, context, pd, descs.dst, &pieces);
  auto kernel = std::make_unique<BlockedConvKernel>(
      context, NodeLabel(spec), std::move(pieces.src_reorder), std::move(pieces.convs),
      std::move(pieces.dst_reorder), std::move(pieces.blocked_src), std::move(pieces.blocked_dst),
      std::move(pieces.workspace_parts), std::move(pieces.addend_reorder), pieces.addend_copy_bytes,
      activation, pd.dst_desc().get_size() / memory::data_type_size(pd.dst_desc().data_type()),
      pd.dst_desc().data_type() == memory::data_type::bf16);
  if (native_output) kernel->SetNativeOutput(pd.dst_desc());
  return kernel;
}

// A convolution marked bf16 whose weights arrive on every run (a training
// step's): X and W converted to bfloat16 on every run into the layouts
// oneDNN picks, Y float32 row-major; nullopt where oneDNN has only its
// reference kernel for the form, or none.
std::optional<std::unique_ptr<Kernel>> ConvertedOperandsConv(const KernelSpec& spec,
                                                             CpuKernelContext& context,
                                                             const ConvDescs& descs,
                                                             const dnnl::primitive_attr& attr,
                                                             memory::data_type product) {
  std::optional<ConvPd> pd;
  try {
    pd.emplace(MakeConvPd(context, descs, attr, dnnl::algorithm::convolution_direct,
                          memory::desc(descs.src_dims, product, memory::format_tag::any),
                          memory::desc(descs.weight_dims, product, memory::format_tag::any),
                          descs.bias, descs.dst));
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  if (IsReference(*pd)) return std::nullopt;
  BoundPrimitive primitive(context, *pd, dnnl::convolution_forward(*pd));
  ConvertedOperand src =
      BindOperand(context, primitive, DNNL_ARG_SRC, descs.src, pd->src_desc(), 0);
  ConvertedOperand weights =
      BindOperand(context, primitive, DNNL_ARG_WEIGHTS, descs.weights, pd->weights_desc(), 1);
  if (descs.has_bias) primitive.BindInput(DNNL_ARG_BIAS, descs.bias, 2);
  primitive.BindOutput(DNNL_ARG_DST, descs.dst, 0);
  const std::string node = NodeLabel(spec);
  return WithConvertedOperand(
      node, std::move(src),
      WithConvertedOperand(node, std::move(weights),
                           std::make_unique<PrimitiveKernel>(context, node, std::move(primitive))));
}

// Row-major X, W and Y, the weights read from the input on every run (in
// bfloat16 where the node is marked so and oneDNN has the form).
KernelOrStatus BuildPlainConvKernel(const KernelSpec& spec, CpuKernelContext& context,
                                    const ConvDescs& descs, const dnnl::primitive_attr& attr,
                                    const ActivationStep& activation) {
  const bool grouped = descs.weight_dims.size() > descs.src_dims.size();
  const memory::data_type product =
      ConvProductType(spec, grouped ? descs.weight_dims[0] : 1, spec.inputs[1]->shape);
  if (product != memory::data_type::f32) {
    std::optional<std::unique_ptr<Kernel>> converted =
        ConvertedOperandsConv(spec, context, descs, attr, product);
    if (converted.has_value()) {
      return WithActivationPass(*std::move(converted), activation,
                                descs.dst.get_size() / sizeof(float));
    }
  }
  const ConvPd pd = MakeConvPd(context, descs, attr, dnnl::algorithm::convolution_direct, descs.src,
                               descs.weights, descs.bias, descs.dst);
  BoundPrimitive primitive(context, pd, dnnl::convolution_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, descs.src, 0);
  primitive.BindInput(DNNL_ARG_WEIGHTS, descs.weights, 1);
  if (descs.has_bias) primitive.BindInput(DNNL_ARG_BIAS, descs.bias, 2);
  primitive.BindOutput(DNNL_ARG_DST, descs.dst, 0);
  return WithActivationPass(
      std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive)), activation,
      descs.dst.get_size() / sizeof(float));
}

// The convolution with its fused clamp (Relu, Clip, ...) as oneDNN's
// post-op, or, where `clamp_by_caller`, run by the kernel after it as a pass
// that keeps NaN (see fused_post_ops.h).
KernelOrStatus BuildConvKernel(const KernelSpec& spec, CpuKernelContext& context,
                               bool clamp_by_caller) {
  // 3-D: no Winograd, and oneDNN picks the layouts (nCdhw16c and its like).
  const bool three_d = spec.inputs[0]->shape.size() == 5;
  std::optional<ConvAttributes> conv;
  std::optional<Conv3dAttributes> conv3d;
  if (three_d) {
    REPLICAD_ASSIGN_OR_RETURN(conv3d, ParseConv3dAttributes(spec));
  } else {
    REPLICAD_ASSIGN_OR_RETURN(conv, ParseConvAttributes(spec));
  }
  const ConvDescs descs = three_d ? DescribeConv3d(spec, *conv3d) : DescribeConv(spec, *conv);
  const Tensor* constant_weights =
      spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
  dnnl::primitive_attr attr = UserScratchpadAttr();
  dnnl::post_ops ops;
  const bool fused_sum = HasFusedSum(*spec.attributes);
  if (fused_sum) ops.append_sum(1.0f);
  // The kernel runs a fused clamp itself, after the convolution and any
  // fused sum, and the blocked kernel (constant weights) a fused SiLU too.
  ActivationStep activation;
  REPLICAD_RETURN_IF_ERROR(AppendFusedActivation(spec, &ops, &activation,
                                                 /*silu_by_caller=*/constant_weights != nullptr,
                                                 clamp_by_caller));
  attr.set_post_ops(ops);
  if (constant_weights != nullptr) {
    const ConvPd pd =
        three_d ? BlockedLayoutPd(context, descs, conv3d->out_channels, attr,
                                  dnnl::algorithm::convolution_direct,
                                  ConvProductType(spec, conv3d->group, spec.inputs[1]->shape))
                : ChooseBlockedPd(spec, context, *conv, descs, attr);
    return BuildBlockedConvKernel(spec, context, pd, descs, attr, *constant_weights, activation);
  }
  if (fused_sum) {
    return absl::InternalError(NodeLabel(spec) +
                               ": a fused Add needs constant weights (the optimizer checks this)");
  }
  if (HasNativeInputs(spec)) return WithRowMajorInputs(spec, context, MakeConvKernel);
  return BuildPlainConvKernel(spec, context, descs, attr, activation);
}

bool AllFinite(const Tensor* t) {
  return t == nullptr || !AnyNonFinite(t->data<float>(), static_cast<size_t>(t->num_elements()));
}

// Winograd runs here: oneDNN has f32 Winograd on AVX-512 only.
bool HasWinograd() {
  static const bool has = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  return has;
}

// The convolution as a direct sum, its fused clamp run by the kernel (a pass
// that keeps NaN): what a request with a NaN or an infinity gets.
KernelOrStatus BuildExactConvKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const bool winograd = context.winograd;
  context.winograd = false;  // Read only while the kernel is built.
  KernelOrStatus exact = BuildConvKernel(spec, context, /*clamp_by_caller=*/true);
  context.winograd = winograd;
  return exact;
}

}  // namespace

// With constant weights, two kernels where they differ on non-finite
// inputs: the fast one (oneDNN's post-op clamp; Winograd where it runs)
// where X (and a fused sum's addend) are finite; the exact one (a direct
// sum and our clamp pass) where they are not, the only case where the two
// differ (a request with a NaN or an infinity). oneDNN's post-op clamps
// turn NaN into numbers, and Winograd's transforms add and subtract
// neighbouring pixels, so that +inf - +inf makes NaN where the direct sum
// has an infinity and a NaN reaches its whole tile. The clamp pass alone,
// on every request, took mobilenet_v2 (ReLU6 after most of its
// convolutions) at batch 1 from 8.8 to 10.2 ms (1 thread) and 9.6 to 10.8 ms
// (2), best of six runs on a busy 2-core AVX2 machine.
KernelOrStatus MakeConvKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> exact, BuildExactConvKernel(spec, context));
  dnnl::post_ops unused;
  ActivationStep activation;
  REPLICAD_RETURN_IF_ERROR(AppendFusedActivation(spec, &unused, &activation));
  const Tensor* weights = spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
  const Tensor* bias = spec.constant_inputs.size() > 2 ? spec.constant_inputs[2] : nullptr;
  const bool clamp = activation.pass == ActivationPass::kClip;
  bool winograd = false;
  if (spec.inputs[0]->shape.size() == 4 && context.winograd && HasWinograd() &&
      weights != nullptr) {
    REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(spec));
    winograd = WinogradPays(conv, spec.inputs[1]->shape) &&
               ConvProductType(spec, conv.group, spec.inputs[1]->shape) == memory::data_type::f32;
  }
  if ((!clamp && !winograd) || weights == nullptr || (HasInput(spec, 2) && bias == nullptr) ||
      !AllFinite(weights) || !AllFinite(bias)) {
    return exact;
  }
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fast,
                            BuildConvKernel(spec, context, /*clamp_by_caller=*/false));
  if (fast->native_output_layout() != exact->native_output_layout() ||
      fast->native_output_bytes() != exact->native_output_bytes() ||
      fast->overwritable_input() != exact->overwritable_input()) {
    return exact;
  }
  const auto checked_input = [&](int index, const Shape& row_major_shape) {
    const memory::desc given =
        GivenLayout(spec, index, RowMajorDesc(row_major_shape, memory::data_type::f32));
    const bool in_plan =
        index < static_cast<int>(spec.input_layouts.size()) && !spec.input_layouts[index].empty();
    return CheckedInput{index, given.get_size() / memory::data_type_size(given.data_type()),
                        in_plan, given.data_type() == memory::data_type::bf16};
  };
  std::vector<CheckedInput> checked{checked_input(0, spec.inputs[0]->shape)};
  if (HasFusedSum(*spec.attributes)) checked.push_back(checked_input(3, spec.outputs[0].shape));
  const size_t output_bytes = fast->native_output_layout().empty()
                                  ? NumElements(spec.outputs[0].shape) * sizeof(float)
                                  : fast->native_output_bytes();
  // The exact kernel was built to learn its workspace and to check it can
  // stand in; it is dropped (with its copy of the weights, unless another
  // plan holds them) and built again by the first request that needs it.
  auto owned = std::make_shared<const OwnedSpec>(spec);
  DeferredKernel deferred{
      [owned, &context] { return BuildExactConvKernel(owned->spec(), context); },
      exact->workspace_bytes()};
  exact.reset();
  return UnlessNonFinite(std::move(fast), std::move(deferred), std::move(checked), &context.finite,
                         output_bytes);
}

}  // namespace replicad
