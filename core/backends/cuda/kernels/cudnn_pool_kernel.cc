#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cudnn_convolution.h"
#include "core/backends/cuda/kernels/cudnn_util.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/model/compute_precision.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// A pooling as cuDNN computes it: over `x` with one pad per spatial dim
// (cuDNN pads both sides alike) into `computed`. When `computed` is not the
// output, the output is its window from row lead[0] and column lead[1] on.
struct PoolForm {
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  Dims4 x{};
  std::array<int64_t, 2> window{};
  std::array<int64_t, 2> pads{};
  std::array<int64_t, 2> strides{};
  Dims4 computed{};
  std::array<int64_t, 2> lead{};
  Dims4 y{};
};

// One spatial dim of a pooling with windows starting at i * stride -
// pads_begin: the least symmetric pad pads_begin + lead * stride (which
// keeps that alignment, `lead` windows earlier) under which cuDNN's floored
// output holds the `output` windows the node needs.
struct DimForm {
  int64_t pad = 0;
  int64_t lead = 0;
  int64_t computed = 0;
};

DimForm FormDim(int64_t input, int64_t kernel, int64_t stride, int64_t pads_begin, int64_t output) {
  // Each step adds two windows and needs one more, so the loop ends.
  for (int64_t lead = 0;; ++lead) {
    const int64_t pad = pads_begin + lead * stride;
    const int64_t span = input + 2 * pad - kernel;
    if (span < 0) continue;
    const int64_t computed = span / stride + 1;
    if (computed >= lead + output) return DimForm{pad, lead, computed};
  }
}

// MaxPool and AveragePool. Max pooling ignores padding and average pooling
// without count_include_pad divides by the elements of X a window covers,
// so both give the node's windows exactly under the wider padding FormDim
// picks. With count_include_pad cuDNN divides by the whole window, which is
// ONNX's divisor only while no window reaches past pads_end (ceil_mode's
// overhang counts for ONNX as outside the window).
absl::StatusOr<PoolForm> WindowPoolForm(const KernelSpec& spec, const Window2d& window,
                                        cudnnPoolingMode_t mode, bool count_include_pad) {
  const Shape& x = spec.inputs[0]->shape;
  PoolForm form;
  form.mode = mode;
  form.x = {x[0], x[1], x[2], x[3]};
  form.y = {x[0], x[1], window.output[0], window.output[1]};
  if (window.dilations != std::array<int64_t, 2>{1, 1}) {
    return NodeUnimplemented(spec, absl::StrCat("cuDNN pooling has no dilation, received "
                                                "dilations [",
                                                absl::StrJoin(window.dilations, ","), "]"));
  }
  form.computed = {x[0], x[1], 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (count_include_pad && (window.output[i] - 1) * window.strides[i] + window.kernel[i] >
                                 x[2 + i] + window.pads_begin[i] + window.pads_end[i]) {
      return NodeUnimplemented(
          spec,
          absl::StrCat("average pooling with count_include_pad whose last window (ceil_mode) "
                       "reaches past pads [",
                       window.pads_begin[0], ",", window.pads_begin[1], ",", window.pads_end[0],
                       ",", window.pads_end[1], "] is not implemented on cuDNN"));
    }
    const DimForm dim = FormDim(x[2 + i], window.kernel[i], window.strides[i], window.pads_begin[i],
                                window.output[i]);
    form.window[i] = window.kernel[i];
    form.strides[i] = window.strides[i];
    form.pads[i] = dim.pad;
    form.lead[i] = dim.lead;
    form.computed[2 + i] = dim.computed;
  }
  return form;
}

// GlobalAveragePool and GlobalMaxPool: one window over all spatial dims,
// which for ranks other than 4 are flattened into one.
PoolForm GlobalPoolForm(const KernelSpec& spec, cudnnPoolingMode_t mode) {
  const Shape& x = spec.inputs[0]->shape;
  PoolForm form;
  form.mode = mode;
  int64_t spatial = 1;
  for (size_t i = 2; i < x.size(); ++i) spatial *= x[i];
  form.x = x.size() == 4 ? Dims4{x[0], x[1], x[2], x[3]} : Dims4{x[0], x[1], spatial, 1};
  form.window = {form.x[2], form.x[3]};
  form.strides = {1, 1};
  form.computed = {x[0], x[1], 1, 1};
  form.y = form.computed;
  return form;
}

// How a pooling's X arrives and its Y leaves: float32, or (a MaxPool
// between two convolutions of a 16-bit chain, compute_precision.h) float16
// or bfloat16 NCHW, in the layout of that name, Y written so where the plan
// keeps it native, else widened to float32 after.
struct PoolTypes {
  bool sixteen_bit = false;
  bool bfloat16 = false;
  bool out_sixteen_bit = false;
};

// cuDNN's pooling into the output, or into the workspace and from there the
// output's window (PoolForm) by a strided copy; 16-bit values are pooled as
// they are (never staged: their MaxPool pads both sides alike and floors).
class CudnnPoolKernel : public Kernel {
 public:
  CudnnPoolKernel(const CudaKernelContext& context, const PoolForm& form, const PoolTypes& types)
      : device_(context.device),
        cudnn_(context.cudnn),
        stream_(context.stream),
        types_(types),
        staged_(form.computed != form.y || (types.sixteen_bit && !types.out_sixteen_bit)),
        computed_elements_(Elements(form.computed)),
        output_elements_(Elements(form.y)),
        lead_offset_(form.lead[0] * form.computed[3] + form.lead[1]) {
    // The output's window in the computed [N, C, H, W], as a broadcast copy
    // with the computed tensor's strides.
    const int offset = kMaxRank - 4;
    for (int i = 0; i < kMaxRank; ++i) copy_index_.out_dims[i] = 1;
    for (int i = 0; i < 4; ++i) copy_index_.out_dims[offset + i] = form.y[i];
    copy_index_.a_strides[offset + 3] = 1;
    copy_index_.a_strides[offset + 2] = form.computed[3];
    copy_index_.a_strides[offset + 1] = form.computed[2] * form.computed[3];
    copy_index_.a_strides[offset] = form.computed[1] * form.computed[2] * form.computed[3];
  }

  // `node` (NodeLabel) names the node in messages.
  absl::Status Init(const PoolForm& form, const std::string& node) {
    const cudnnDataType_t type = !types_.sixteen_bit ? CUDNN_DATA_FLOAT
                                 : types_.bfloat16   ? CUDNN_DATA_BFLOAT16
                                                     : CUDNN_DATA_HALF;
    if (types_.sixteen_bit && form.computed != form.y) {
      return absl::InternalError(
          absl::StrCat(node, ": a 16-bit pooling computes [", absl::StrJoin(form.computed, ","),
                       "] for an output of [", absl::StrJoin(form.y, ","),
                       "]; only windows cuDNN pools as they are take 16-bit values"));
    }
    REPLICAD_RETURN_IF_ERROR(SetCudnnTensor(device_, x_, form.x, type));
    REPLICAD_RETURN_IF_ERROR(SetCudnnTensor(device_, computed_, form.computed, type));
    REPLICAD_CUDA_RETURN_IF_ERROR(device_, cudnnCreatePoolingDescriptor(pool_.receive()));
    // NaN propagates through max pooling as through ONNX's reference max.
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudnnSetPooling2dDescriptor(
                     pool_.get(), form.mode, CUDNN_PROPAGATE_NAN, static_cast<int>(form.window[0]),
                     static_cast<int>(form.window[1]), static_cast<int>(form.pads[0]),
                     static_cast<int>(form.pads[1]), static_cast<int>(form.strides[0]),
                     static_cast<int>(form.strides[1])));
    int n = 0, c = 0, h = 0, w = 0;
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudnnGetPooling2dForwardOutputDim(pool_.get(), x_.get(), &n, &c, &h, &w));
    if (Dims4{n, c, h, w} != form.computed) {
      return absl::InternalError(absl::StrCat(node, ": cuDNN pools into [", n, ",", c, ",", h, ",",
                                              w, "], expected [", absl::StrJoin(form.computed, ","),
                                              "]"));
    }
    return absl::OkStatus();
  }

  size_t workspace_bytes() const override {
    const size_t element = types_.sixteen_bit ? sizeof(uint16_t) : sizeof(float);
    return staged_ ? static_cast<size_t>(computed_elements_) * element : 0;
  }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

  std::string native_output_layout() const override {
    if (!types_.out_sixteen_bit) return {};
    return types_.bfloat16 ? kCudaBFloat16Layout : kCudaFloat16Layout;
  }
  size_t native_output_bytes() const override {
    return types_.out_sixteen_bit ? static_cast<size_t>(output_elements_) * sizeof(uint16_t) : 0;
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float one = 1.0f;
    const float zero = 0.0f;
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudnnPoolingForward(cudnn_, pool_.get(), &one, x_.get(), inputs[0], &zero,
                                     computed_.get(), staged_ ? workspace_ : outputs[0]));
    if (!staged_) return absl::OkStatus();
    float* y = static_cast<float*>(outputs[0]);
    if (types_.sixteen_bit) {  // Not kept native: widened, exactly.
      LaunchHalfToFloat(static_cast<const uint16_t*>(workspace_), y, output_elements_,
                        types_.bfloat16, stream_);
      return LastLaunchStatus(device_, "LaunchHalfToFloat");
    }
    LaunchBroadcastCopy(static_cast<const float*>(workspace_) + lead_offset_, y, output_elements_,
                        copy_index_, stream_);
    return LastLaunchStatus(device_, "LaunchBroadcastCopy");
  }

 private:
  std::string device_;
  cudnnHandle_t cudnn_;
  cudaStream_t stream_;
  PoolTypes types_;
  bool staged_;
  int64_t computed_elements_;
  int64_t output_elements_;
  int64_t lead_offset_;
  BroadcastIndex copy_index_;
  CudnnTensorDescriptor x_;
  CudnnTensorDescriptor computed_;
  CudnnPoolingDescriptor pool_;
  void* workspace_ = nullptr;
};

// X's layout: float32 (none), or a 16-bit chain's, which only a MaxPool
// takes (Internal naming the node otherwise: the plan's marks allow no other).
absl::StatusOr<PoolTypes> PoolTypesOf(const KernelSpec& spec) {
  PoolTypes types;
  if (spec.input_layouts.empty() || spec.input_layouts[0].empty()) return types;
  const std::string& layout = spec.input_layouts[0];
  if (spec.op_type != "MaxPool" ||
      (layout != kCudaFloat16Layout && layout != kCudaBFloat16Layout)) {
    return absl::InternalError(absl::StrCat(NodeLabel(spec), ": X arrives in layout '", layout,
                                            "'; only a 2-D MaxPool reads '", kCudaFloat16Layout,
                                            "' or '", kCudaBFloat16Layout, "'"));
  }
  types.sixteen_bit = true;
  types.bfloat16 = layout == kCudaBFloat16Layout;
  // Out in 16 bits only where the node's mark says its readers take them
  // (else widened: a reader that is no 16-bit convolution gets float32).
  absl::StatusOr<std::string> mark = spec.attributes->GetString(kOutputPrecisionAttribute, "");
  const ComputePrecision precision =
      types.bfloat16 ? ComputePrecision::kBFloat16 : ComputePrecision::kFloat16;
  types.out_sixteen_bit =
      spec.native_output && mark.ok() && *mark == ComputePrecisionName(precision);
  return types;
}

}  // namespace

KernelOrStatus MakeCudaPoolKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const DType x = spec.inputs[0]->dtype;
  if (spec.op_type == "MaxPool" && (x == DType::kInt8 || x == DType::kUint8) &&
      spec.inputs[0]->shape.size() == 4) {
    return MakeCudaIntegerMaxPoolKernel(spec, context);
  }
  if (x != DType::kFloat32) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend pools float32, and int8 or "
                                                "uint8 in a 2-D MaxPool; received ",
                                                TensorTypeToString(*spec.inputs[0])));
  }
  // cuDNN's pooling serves 2-D windows; 3-D ones get the CPU's bytes from our own kernel.
  if ((spec.op_type == "MaxPool" || spec.op_type == "AveragePool") &&
      spec.inputs[0]->shape.size() == 5) {
    return MakeCudaPool3dKernel(spec, context);
  }
  PoolForm form;
  if (spec.op_type == "MaxPool") {
    if (spec.outputs.size() > 1) {
      return NodeUnimplemented(spec, "MaxPool's Indices output is not implemented on cuDNN");
    }
    REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(spec));
    REPLICAD_ASSIGN_OR_RETURN(form, WindowPoolForm(spec, window, CUDNN_POOLING_MAX,
                                                   /*count_include_pad=*/false));
  } else if (spec.op_type == "AveragePool") {
    REPLICAD_ASSIGN_OR_RETURN(AveragePoolAttributes pool, ParseAveragePoolAttributes(spec));
    REPLICAD_ASSIGN_OR_RETURN(
        form, WindowPoolForm(spec, pool.window,
                             pool.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                    : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                             pool.count_include_pad));
  } else if (spec.op_type == "GlobalAveragePool") {
    form = GlobalPoolForm(spec, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
  } else if (spec.op_type == "GlobalMaxPool") {
    form = GlobalPoolForm(spec, CUDNN_POOLING_MAX);
  } else {
    return NodeUnimplemented(spec, "the cuDNN pooling kernel has no such op");
  }
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN pooling takes", {form.x, form.computed}));
  REPLICAD_ASSIGN_OR_RETURN(PoolTypes types, PoolTypesOf(spec));
  auto kernel = std::make_unique<CudnnPoolKernel>(context, form, types);
  REPLICAD_RETURN_IF_ERROR(kernel->Init(form, NodeLabel(spec)));
  return kernel;
}

}  // namespace replicad
