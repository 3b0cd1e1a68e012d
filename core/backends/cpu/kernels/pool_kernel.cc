#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/backends/cpu/kernels/non_finite.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {

using dnnl::memory;

namespace {

// oneDNN floors the output size; with ceil_mode the last window needs extra
// right padding, which the pooling must then ignore.
memory::dims FlooringPaddingR(const Window2d& window, const Shape& x) {
  memory::dims padding_r(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t dilated = (window.kernel[i] - 1) * window.dilations[i] + 1;
    padding_r[i] = std::max(window.pads_end[i], (window.output[i] - 1) * window.strides[i] +
                                                    dilated - x[2 + i] - window.pads_begin[i]);
  }
  return padding_r;
}

// Average pooling that counts the explicit pads but not a ceil_mode
// window's overhang, which no oneDNN algorithm does alone: X is copied into
// the interior of a buffer whose zero border is the explicit padding (zeroed
// once; the copy never writes it), and that buffer is pooled excluding only
// the overhang.
class PaddedAveragePoolKernel : public Kernel {
 public:
  PaddedAveragePoolKernel(CpuKernelContext& context, std::string node, BoundPrimitive copy,
                          BoundPrimitive pool)
      : context_(context), node_(std::move(node)), copy_(std::move(copy)), pool_(std::move(pool)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    absl::Status status = copy_.Execute(inputs, outputs, node_);
    if (status.ok()) status = pool_.Execute(inputs, outputs, node_);
    if (!status.ok()) return status;
    return WaitStream(context_, node_);
  }

 private:
  CpuKernelContext& context_;
  std::string node_;
  BoundPrimitive copy_;
  BoundPrimitive pool_;
};

// A pooling's X and Y layouts. X may arrive in its producer's layout; the
// pooling reads it there, and writes Y in a layout of oneDNN's choice too:
// as it is when Y's readers take one (a stem's or a transition's pooling
// between convolutions), else reordered to row-major after (the pooling
// before a classifier's Flatten: oneDNN pools row-major values with its
// plain loops, many times slower).
struct PoolingLayouts {
  memory::desc src, dst, row_major_dst;
  bool reorder_output = false;  // Y's readers need row-major; dst is oneDNN's choice.
};
PoolingLayouts LayoutsFor(const KernelSpec& spec) {
  const Shape& x = spec.inputs[0]->shape;
  const Shape& y = spec.outputs[0].shape;
  // float32, or an int8 model's int8 or uint8 (max pooling).
  const memory::data_type type = DnnlDataType(spec.inputs[0]->dtype);
  const memory::desc row_major_src(memory::dims(x.begin(), x.end()), type,
                                   memory::format_tag::nchw);
  const memory::desc row_major_dst(memory::dims(y.begin(), y.end()), type,
                                   memory::format_tag::nchw);
  const memory::desc src = GivenLayout(spec, 0, row_major_src);
  if (src == row_major_src) return PoolingLayouts{src, row_major_dst, row_major_dst};
  // Y in X's type: bfloat16 where a bf16 chain's convolution wrote X so
  // (compute_precision.h: a MaxPool between two of them passes their values
  // on), reordered to float32 after where Y's readers need row-major.
  return PoolingLayouts{
      src, memory::desc(row_major_dst.dims(), src.data_type(), memory::format_tag::any),
      row_major_dst, !spec.native_output};
}

// The pooling `pd` reading input 0 in `layouts.src`; see RejectReference
// for a native layout only oneDNN's reference kernel reads.
std::unique_ptr<PrimitiveKernel> PoolingKernel(const KernelSpec& spec, CpuKernelContext& context,
                                               const dnnl::pooling_v2_forward::primitive_desc& pd,
                                               const PoolingLayouts& layouts) {
  if (layouts.dst != layouts.row_major_dst) RejectReference(pd);
  BoundPrimitive primitive(context, pd, dnnl::pooling_v2_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, layouts.src, 0);
  primitive.BindOutput(DNNL_ARG_DST, pd.dst_desc(), 0);
  auto kernel = std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
  if (pd.dst_desc() != layouts.row_major_dst && !layouts.reorder_output) {
    kernel->SetNativeOutput(pd.dst_desc());
  }
  return kernel;
}

// `pooling` (writing Y in `pd`'s layout) as its node's kernel: Y reordered
// to row-major where its readers need it.
KernelOrStatus WithLayoutsOut(const KernelSpec& spec, CpuKernelContext& context,
                              std::unique_ptr<Kernel> pooling,
                              const dnnl::pooling_v2_forward::primitive_desc& pd,
                              const PoolingLayouts& layouts) {
  if (!layouts.reorder_output) return pooling;
  return WithOutputReordered(spec, context, std::move(pooling), pd.dst_desc(),
                             layouts.row_major_dst);
}

// oneDNN 2.6's max pooling (every implementation) compares with the
// running maximum and keeps it unless the new value is greater, which a NaN
// never is: a NaN is skipped, and a window of NaN gives -FLT_MAX. ONNX
// Runtime's MLAS keeps a NaN only as a window's last element; PyTorch's
// gives NaN for any window that holds one, and so does this kernel. After
// oneDNN's pooling it looks for a NaN or an infinity in X (one vectorized
// read, skipped where the kernel before wrote X knowing it finite, see
// FiniteOutputs); only where it finds a NaN does it write NaN to each output
// whose window reads it. X and Y are float32, or both bfloat16 (a bf16
// chain's values, between two of its convolutions).
class NaNKeepingMaxPoolKernel : public Kernel {
 public:
  NaNKeepingMaxPoolKernel(std::unique_ptr<Kernel> pooling, const memory::desc& src,
                          const memory::desc& dst, const Window2d& window, bool in_plan,
                          FiniteOutputs* finite)
      : pooling_(std::move(pooling)),
        src_(src),
        dst_(dst),
        window_(window),
        in_plan_(in_plan),
        finite_(finite),
        strided_(SpatialDimsUnblocked(src.data) && SpatialDimsUnblocked(dst.data)),
        bfloat16_(src.data_type() == memory::data_type::bf16),
        index_(4),
        out_index_(4) {
    rows_.reserve(window.output[0]);
    cols_.reserve(window.output[1]);
  }

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    REPLICAD_RETURN_IF_ERROR(pooling_->Run(run, inputs, outputs));
    const size_t x_bytes = src_.get_size();
    const bool finite =
        (in_plan_ && finite_->Holds(inputs[0], x_bytes)) ||
        (bfloat16_ ? !AnyNonFiniteBFloat16(static_cast<const uint16_t*>(inputs[0]),
                                           x_bytes / sizeof(uint16_t))
                   : !AnyNonFinite(static_cast<const float*>(inputs[0]), x_bytes / sizeof(float)));
    if (finite) {
      finite_->Record(outputs[0], dst_.get_size());
    } else if (bfloat16_) {
      MarkNaNWindows(static_cast<const uint16_t*>(inputs[0]), static_cast<uint16_t*>(outputs[0]));
    } else {
      MarkNaNWindows(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]));
    }
    return absl::OkStatus();
  }
  size_t workspace_bytes() const override { return pooling_->workspace_bytes(); }
  void SetWorkspace(void* workspace) override { pooling_->SetWorkspace(workspace); }
  std::string native_output_layout() const override { return pooling_->native_output_layout(); }
  size_t native_output_bytes() const override { return pooling_->native_output_bytes(); }

 private:
  // The outputs along spatial dim `d` whose windows read input position
  // `at` (o * stride - pad + k * dilation == at for some tap k), into
  // `outputs` (reserved: no allocation).
  void OutputsReading(int d, int64_t at, std::vector<int64_t>* outputs) const {
    outputs->clear();
    for (int64_t o = 0; o < window_.output[d]; ++o) {
      const int64_t offset = at + window_.pads_begin[d] - o * window_.strides[d];
      if (offset >= 0 && offset % window_.dilations[d] == 0 &&
          offset / window_.dilations[d] < window_.kernel[d]) {
        outputs->push_back(o);
      }
    }
  }

  // Element by element over X's logical indices (its channel padding, which
  // no output reads, skipped): run only for a request with a NaN. Where rows
  // and columns are not inside the layout's inner blocks (row-major, nChw8c,
  // nChw16c: every layout oneDNN picks here), an element of one image and
  // channel is a base offset plus row and column strides, and ElementOffset,
  // a loop over the layout's blocks, runs once per image and channel instead
  // of per element (perf_analyzer's random bytes hold NaNs in most requests:
  // per element, it took a fifth of the daemon's time on the default model).
  // T: float, or uint16_t for bfloat16 bits (X and Y alike).
  template <typename T>
  void MarkNaNWindows(const T* x, T* y) {
    const memory::dims& dims = src_.dims();
    const T nan = NaNOf<T>();
    const dnnl_dims_t& x_strides = src_.data.format_desc.blocking.strides;
    const dnnl_dims_t& y_strides = dst_.data.format_desc.blocking.strides;
    std::vector<int64_t>& i = index_;
    for (i[0] = 0; i[0] < dims[0]; ++i[0])
      for (i[1] = 0; i[1] < dims[1]; ++i[1]) {
        i[2] = i[3] = 0;
        const int64_t plane = ElementOffset(src_.data, i);
        out_index_[0] = i[0];
        out_index_[1] = i[1];
        out_index_[2] = out_index_[3] = 0;
        const int64_t out_plane = ElementOffset(dst_.data, out_index_);
        for (i[2] = 0; i[2] < dims[2]; ++i[2])
          for (i[3] = 0; i[3] < dims[3]; ++i[3]) {
            const int64_t at = strided_ ? plane + i[2] * x_strides[2] + i[3] * x_strides[3]
                                        : ElementOffset(src_.data, i);
            if (!IsNaN(x[at])) continue;
            OutputsReading(0, i[2], &rows_);
            OutputsReading(1, i[3], &cols_);
            for (int64_t oh : rows_) {
              for (int64_t ow : cols_) {
                out_index_[2] = oh;
                out_index_[3] = ow;
                y[strided_ ? out_plane + oh * y_strides[2] + ow * y_strides[3]
                           : ElementOffset(dst_.data, out_index_)] = nan;
              }
            }
          }
      }
  }

  template <typename T>
  static T NaNOf() {
    if constexpr (std::is_same_v<T, float>) {
      return std::numeric_limits<float>::quiet_NaN();
    } else {
      return kBFloat16QuietNaN;
    }
  }
  static bool IsNaN(float v) { return std::isnan(v); }
  // A bfloat16 is NaN where its exponent bits are all set and its mantissa is not 0.
  static bool IsNaN(uint16_t bits) { return (bits & 0x7fff) > 0x7f80; }
  static constexpr uint16_t kBFloat16QuietNaN = 0x7fc0;

  static bool SpatialDimsUnblocked(const dnnl_memory_desc_t& md) {
    const dnnl_blocking_desc_t& blocking = md.format_desc.blocking;
    for (int k = 0; k < blocking.inner_nblks; ++k) {
      if (blocking.inner_idxs[k] >= 2) return false;
    }
    return true;
  }

  std::unique_ptr<Kernel> pooling_;
  memory::desc src_, dst_;
  Window2d window_;
  bool in_plan_;  // X comes in a native layout: a kernel of the plan wrote it.
  FiniteOutputs* finite_;
  const bool strided_;   // Rows and columns outside both layouts' inner blocks.
  const bool bfloat16_;  // X and Y hold bfloat16 (a bf16 chain's values), else float32.
  // Sized here so that Run does not allocate.
  std::vector<int64_t> index_, out_index_, rows_, cols_;
};

}  // namespace

KernelOrStatus MakeMaxPoolKernel(const KernelSpec& spec, CpuKernelContext& context) {
  if (spec.inputs.size() == 1 && spec.inputs[0] && spec.inputs[0]->shape.size() == 5) {
    return MakePool3dKernel(spec, context);
  }
  REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(spec));
  const Shape& x = spec.inputs[0]->shape;
  const PoolingLayouts layouts = LayoutsFor(spec);
  // Max pooling ignores padding, so the extra right padding is harmless.
  const memory::dims padding_r = FlooringPaddingR(window, x);
  return InPlaceOrRowMajor(spec, context, MakeMaxPoolKernel, [&]() -> KernelOrStatus {
    const dnnl::pooling_v2_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, layouts.src, layouts.dst,
        {window.strides[0], window.strides[1]}, {window.kernel[0], window.kernel[1]},
        {window.dilations[0] - 1, window.dilations[1] - 1},
        {window.pads_begin[0], window.pads_begin[1]}, padding_r);
    const dnnl::pooling_v2_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
    if (spec.inputs[0]->dtype != DType::kFloat32) {  // Integers hold no NaN to keep.
      return WithLayoutsOut(spec, context, PoolingKernel(spec, context, pd, layouts), pd, layouts);
    }
    const bool in_plan = !spec.input_layouts.empty() && !spec.input_layouts[0].empty();
    return WithLayoutsOut(spec, context,
                          std::make_unique<NaNKeepingMaxPoolKernel>(
                              PoolingKernel(spec, context, pd, layouts), layouts.src, pd.dst_desc(),
                              window, in_plan, &context.finite),
                          pd, layouts);
  });
}

KernelOrStatus MakeAveragePoolKernel(const KernelSpec& spec, CpuKernelContext& context) {
  if (spec.inputs.size() == 1 && spec.inputs[0] && spec.inputs[0]->shape.size() == 5) {
    return MakePool3dKernel(spec, context);
  }
  REPLICAD_ASSIGN_OR_RETURN(AveragePoolAttributes pool, ParseAveragePoolAttributes(spec));
  const Window2d& window = pool.window;
  const Shape& x = spec.inputs[0]->shape;
  const Shape& y = spec.outputs[0].shape;
  const memory::data_type f32 = memory::data_type::f32;
  const memory::desc src(memory::dims(x.begin(), x.end()), f32, memory::format_tag::nchw);
  const memory::desc dst(memory::dims(y.begin(), y.end()), f32, memory::format_tag::nchw);
  const memory::dims strides{window.strides[0], window.strides[1]};
  const memory::dims kernel{window.kernel[0], window.kernel[1]};
  const memory::dims dilation{window.dilations[0] - 1, window.dilations[1] - 1};
  const memory::dims padding_r = FlooringPaddingR(window, x);
  const bool overhang = padding_r[0] > window.pads_end[0] || padding_r[1] > window.pads_end[1];

  const PoolingLayouts layouts = LayoutsFor(spec);
  if (overhang && pool.count_include_pad && layouts.src != src) {
    return WithRowMajorInputs(spec, context, MakeAveragePoolKernel);
  }
  if (!pool.count_include_pad || !overhang) {
    return InPlaceOrRowMajor(spec, context, MakeAveragePoolKernel, [&]() -> KernelOrStatus {
      // Excluding padding also excludes the overhang, as ONNX wants.
      const dnnl::pooling_v2_forward::desc desc(
          dnnl::prop_kind::forward_inference,
          pool.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                 : dnnl::algorithm::pooling_avg_exclude_padding,
          layouts.src, layouts.dst, strides, kernel, dilation,
          {window.pads_begin[0], window.pads_begin[1]}, padding_r);
      const dnnl::pooling_v2_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
      return WithLayoutsOut(spec, context, PoolingKernel(spec, context, pd, layouts), pd, layouts);
    });
  }

  const memory::desc padded_desc({x[0], x[1], x[2] + window.pads_begin[0] + window.pads_end[0],
                                  x[3] + window.pads_begin[1] + window.pads_end[1]},
                                 f32, memory::format_tag::nchw);
  dnnl::memory padded(padded_desc, context.engine);
  std::memset(padded.get_data_handle(), 0, padded_desc.get_size());
  const memory::desc interior_desc = padded_desc.submemory_desc(
      memory::dims(x.begin(), x.end()), {0, 0, window.pads_begin[0], window.pads_begin[1]});
  const dnnl::memory interior(interior_desc, context.engine, padded.get_data_handle());
  const dnnl::reorder::primitive_desc copy_pd(context.engine, src, context.engine, interior_desc,
                                              UserScratchpadAttr());
  BoundPrimitive copy(context, copy_pd, dnnl::reorder(copy_pd));
  copy.BindInput(DNNL_ARG_FROM, src, 0);
  copy.BindFixed(DNNL_ARG_TO, interior);

  const dnnl::pooling_v2_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_exclude_padding, padded_desc,
      dst, strides, kernel, dilation, {0, 0},
      {padding_r[0] - window.pads_end[0], padding_r[1] - window.pads_end[1]});
  const dnnl::pooling_v2_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive averaging(context, pd, dnnl::pooling_v2_forward(pd));
  averaging.BindFixed(DNNL_ARG_SRC, padded);
  averaging.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PaddedAveragePoolKernel>(context, NodeLabel(spec), std::move(copy),
                                                   std::move(averaging));
}

// A mean reduction over every spatial dim, which covers any rank (oneDNN's
// pooling stops at 3 spatial dims).
// X may arrive in its producer's layout (the squeeze of a squeeze-excitation
// block reads the convolution's output where it lies). Y's bytes are those of
// [N, C, 1, ...] whatever its shape (a ReduceMean's [N, C] too).
KernelOrStatus MakeGlobalAveragePoolKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const Shape& x = spec.inputs[0]->shape;
  Shape y = x;
  std::fill(y.begin() + std::min<size_t>(2, y.size()), y.end(), 1);
  // oneDNN rejects a reduction that reduces nothing; the mean of one element
  // is the element.
  if (x == y) return WithRowMajorInputs(spec, context, MakeCopyKernel);
  const memory::desc row_major = RowMajorDesc(x, memory::data_type::f32);
  const memory::desc given = GivenLayout(spec, 0, row_major);
  if (given == row_major || x.size() != 4) {
    return MakeDnnlReductionKernel(spec, context, dnnl::algorithm::reduction_mean, given, y);
  }
  // oneDNN's reduction reads only row-major fast; its pooling, one window the
  // size of the image, reads the convolutions' layouts. Its output, [N, C, 1,
  // 1] in the same layout, is row-major byte for byte (unless channels are
  // blocked and padded: then the reorder).
  return InPlaceOrRowMajor(spec, context, MakeGlobalAveragePoolKernel, [&]() -> KernelOrStatus {
    const memory::desc dst = RowMajorDesc(y, memory::data_type::f32);
    const memory::desc any_dst(memory::dims(y.begin(), y.end()), memory::data_type::f32,
                               memory::format_tag::any);
    const dnnl::pooling_v2_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_exclude_padding, given,
        any_dst, {1, 1}, {x[2], x[3]}, {0, 0}, {0, 0}, {0, 0});
    const dnnl::pooling_v2_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
    RejectReference(pd);
    if (!SameBytes(pd.dst_desc(), dst)) {
      throw dnnl::error(dnnl_unimplemented, "pooled channels are blocked");
    }
    BoundPrimitive primitive(context, pd, dnnl::pooling_v2_forward(pd));
    primitive.BindInput(DNNL_ARG_SRC, given, 0);
    primitive.BindOutput(DNNL_ARG_DST, pd.dst_desc(), 0);
    return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
  });
}

}  // namespace replicad
