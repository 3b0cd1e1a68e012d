#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cudnn_convolution.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/conv_transpose_attributes.h"
#include "core/ops/fused_activation.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// Conv (cuDNN's forward) or ConvTranspose (cuDNN's data gradient, from its
// y to its x), then the bias, then for Conv the fused residual sum and
// activation in place on the output.
class CudnnConvKernel : public Kernel {
 public:
  CudnnConvKernel(const CudaKernelContext& context, std::unique_ptr<ConvDescriptors> descriptors,
                  bool transposed, ConvAlgorithm choice, bool fused_sum, CudaUnary activation,
                  int64_t output_elements)
      : device_(context.device),
        cudnn_(context.cudnn),
        stream_(context.stream),
        d_(std::move(descriptors)),
        transposed_(transposed),
        choice_(choice),
        fused_sum_(fused_sum),
        activation_(activation),
        output_elements_(output_elements) {}

  // A bias of `channels` values added to an output of `rank` dims (4 or 5).
  absl::Status InitBias(int64_t channels, size_t rank) {
    has_bias_ = true;
    if (rank == 4) return SetCudnnTensor(device_, bias_, {1, channels, 1, 1});
    Shape bias(rank, 1);
    bias[1] = channels;
    return SetCudnnTensorNd(device_, bias_, bias);
  }

  size_t workspace_bytes() const override { return choice_.workspace_bytes; }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float one = 1.0f;
    const float zero = 0.0f;
    float* out = static_cast<float*>(outputs[0]);
    cudnnTensorDescriptor_t out_desc = transposed_ ? d_->x.get() : d_->y.get();
    if (transposed_) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, cudnnConvolutionBackwardData(
                       cudnn_, &one, d_->w.get(), inputs[1], d_->y.get(), inputs[0], d_->conv.get(),
                       static_cast<cudnnConvolutionBwdDataAlgo_t>(choice_.algorithm), workspace_,
                       choice_.workspace_bytes, &zero, out_desc, out));
    } else {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, cudnnConvolutionForward(
                       cudnn_, &one, d_->x.get(), inputs[0], d_->w.get(), inputs[1], d_->conv.get(),
                       static_cast<cudnnConvolutionFwdAlgo_t>(choice_.algorithm), workspace_,
                       choice_.workspace_bytes, &zero, out_desc, out));
    }
    if (has_bias_) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, cudnnAddTensor(cudnn_, &one, bias_.get(), inputs[2], &one, out_desc, out));
    }
    if (fused_sum_) {
      LaunchAddUnary(out, static_cast<const float*>(inputs[3]), output_elements_, activation_,
                     stream_);
      return LastLaunchStatus(device_, "LaunchAddUnary");
    }
    if (activation_.op != CudaUnaryOp::kIdentity) {
      LaunchUnary(out, out, output_elements_, activation_, stream_);
      return LastLaunchStatus(device_, "LaunchUnary");
    }
    return absl::OkStatus();
  }

 private:
  std::string device_;
  cudnnHandle_t cudnn_;
  cudaStream_t stream_;
  std::unique_ptr<ConvDescriptors> d_;
  bool transposed_;
  ConvAlgorithm choice_;
  bool fused_sum_;
  CudaUnary activation_;
  int64_t output_elements_;
  bool has_bias_ = false;
  CudnnTensorDescriptor bias_;  // [1, channels, 1, ...], created only with a bias.
  void* workspace_ = nullptr;
};

// A 3-D Conv (X [N, C, D, H, W]: video models such as r3d_18) through
// cuDNN's Nd descriptors, with the same bias, fused sum and activation.
KernelOrStatus MakeCudaConv3dKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Conv3dAttributes conv, ParseConv3dAttributes(spec));
  REPLICAD_ASSIGN_OR_RETURN(std::optional<FusedActivation> fused,
                            ReadFusedActivation(*spec.attributes));
  REPLICAD_ASSIGN_OR_RETURN(CudaUnary activation, FusedUnary(fused));
  REPLICAD_ASSIGN_OR_RETURN(ConvGeometry3d geometry, SymmetricConv3dGeometry(spec, conv));
  REPLICAD_ASSIGN_OR_RETURN(
      std::unique_ptr<ConvDescriptors> d,
      MakeConv3dDescriptors(spec, context, spec.inputs[0]->shape, spec.inputs[1]->shape,
                            spec.outputs[0].shape, geometry));
  REPLICAD_ASSIGN_OR_RETURN(ConvAlgorithm choice,
                            ChooseConvAlgorithm(spec, context, *d, ConvDirection::kForward));
  auto kernel = std::make_unique<CudnnConvKernel>(context, std::move(d), /*transposed=*/false,
                                                  choice, HasFusedSum(*spec.attributes), activation,
                                                  NumElements(spec.outputs[0].shape));
  if (HasInput(spec, 2)) REPLICAD_RETURN_IF_ERROR(kernel->InitBias(conv.out_channels, 5));
  return kernel;
}

// ConvTranspose is the data gradient of the convolution from its output Y
// to its input X. With padding pads_begin on both sides, Y's row o receives
// X's row i through kernel row k where o = i * stride + k * dilation -
// pads_begin, as ONNX's ConvTranspose. cuDNN accepts the output size when
// the forward convolution of Y gives back X's size, which covers
// output_padding and pads_end within a stride of pads_begin; negative pads
// do not fit. Unimplemented naming the node, its pads and output_padding
// otherwise.
template <size_t N>
absl::Status CheckTransposedPads(const KernelSpec& spec, const ConvTransposeGeometry<N>& conv) {
  const Shape& x = spec.inputs[0]->shape;
  const Shape& y = spec.outputs[0].shape;
  for (size_t i = 0; i < N; ++i) {
    const int64_t dilated = (conv.kernel[i] - 1) * conv.dilations[i] + 1;
    const int64_t span = y[2 + i] + 2 * conv.pads_begin[i] - dilated;
    if (conv.pads_begin[i] < 0 || span < 0 || span / conv.strides[i] + 1 != x[2 + i]) {
      return NodeUnimplemented(
          spec, absl::StrCat("cuDNN pads both sides of a spatial dim alike and not negatively; "
                             "pads [",
                             absl::StrJoin(conv.pads_begin, ","), ",",
                             absl::StrJoin(conv.pads_end, ","), "] (", PadsLayout(N),
                             ") with output_padding [", absl::StrJoin(conv.output_padding, ","),
                             "] give an output it cannot produce"));
    }
  }
  return absl::OkStatus();
}

// A 3-D ConvTranspose through cuDNN's Nd descriptors, as the 2-D one:
// cuDNN's dy is X [N, C, D, H, W], its dx is Y, and ONNX's W [C, M/group,
// kD, kH, kW] is that convolution's filter as it stands.
KernelOrStatus MakeCudaConvTranspose3dKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConvTranspose3dAttributes conv, ParseConvTranspose3dAttributes(spec));
  REPLICAD_RETURN_IF_ERROR(CheckTransposedPads(spec, conv));
  ConvGeometry3d geometry;
  geometry.pads = conv.pads_begin;
  geometry.strides = conv.strides;
  geometry.dilations = conv.dilations;
  geometry.group = conv.group;
  REPLICAD_ASSIGN_OR_RETURN(
      std::unique_ptr<ConvDescriptors> d,
      MakeConv3dDescriptors(spec, context, spec.outputs[0].shape, spec.inputs[1]->shape,
                            spec.inputs[0]->shape, geometry));
  REPLICAD_ASSIGN_OR_RETURN(ConvAlgorithm choice,
                            ChooseConvAlgorithm(spec, context, *d, ConvDirection::kBackwardData));
  auto kernel = std::make_unique<CudnnConvKernel>(context, std::move(d), /*transposed=*/true,
                                                  choice, /*fused_sum=*/false, CudaUnary{},
                                                  NumElements(spec.outputs[0].shape));
  if (HasInput(spec, 2)) REPLICAD_RETURN_IF_ERROR(kernel->InitBias(conv.out_channels, 5));
  return kernel;
}

}  // namespace

KernelOrStatus MakeCudaConvKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (TakesSixteenBitConv(spec, context)) {
    KernelOrStatus sixteen_bit = MakeCudaConv16Kernel(spec, context);
    // Where cuDNN has no 16-bit algorithm for this convolution (Unimplemented)
    // and its input is float32, it runs as the float32 path runs marked ones
    // (its output then float32 too, which its readers take as it comes).
    if (sixteen_bit.ok() || !absl::IsUnimplemented(sixteen_bit.status()) ||
        ArrivesInSixteenBits(spec)) {
      return sixteen_bit;
    }
  }
  if (spec.inputs[0]->shape.size() == 5) return MakeCudaConv3dKernel(spec, context);
  REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(spec));
  const Dims4 x = ToDims4(spec.inputs[0]->shape);
  const Dims4 w = ToDims4(spec.inputs[1]->shape);
  const Dims4 y = ToDims4(spec.outputs[0].shape);
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN convolutions take", {x, w, y}));
  REPLICAD_ASSIGN_OR_RETURN(ConvGeometry geometry, SymmetricConvGeometry(spec, conv, {x[2], x[3]}));

  REPLICAD_ASSIGN_OR_RETURN(std::optional<FusedActivation> fused,
                            ReadFusedActivation(*spec.attributes));
  REPLICAD_ASSIGN_OR_RETURN(CudaUnary activation, FusedUnary(fused));
  const bool fused_sum = HasFusedSum(*spec.attributes);

  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<ConvDescriptors> d,
                            MakeConvDescriptors(spec, context, x, w, y, geometry));
  REPLICAD_ASSIGN_OR_RETURN(ConvAlgorithm choice,
                            ChooseConvAlgorithm(spec, context, *d, ConvDirection::kForward));
  auto kernel =
      std::make_unique<CudnnConvKernel>(context, std::move(d), /*transposed=*/false, choice,
                                        fused_sum, activation, NumElements(spec.outputs[0].shape));
  if (HasInput(spec, 2)) REPLICAD_RETURN_IF_ERROR(kernel->InitBias(y[1], 4));
  return kernel;
}

// The 2-D ConvTranspose (CheckTransposedPads says how), 3-D ones through
// MakeCudaConvTranspose3dKernel: cuDNN's dy is X, its dx is Y, and ONNX's W
// [C, M/group, kH, kW] is that convolution's filter as it stands.
KernelOrStatus MakeCudaConvTransposeKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.inputs[0]->shape.size() == 5) return MakeCudaConvTranspose3dKernel(spec, context);
  REPLICAD_ASSIGN_OR_RETURN(ConvTransposeAttributes conv, ParseConvTransposeAttributes(spec));
  const Dims4 x = ToDims4(spec.inputs[0]->shape);
  const Dims4 w = ToDims4(spec.inputs[1]->shape);
  const Dims4 y = ToDims4(spec.outputs[0].shape);
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN convolutions take", {x, w, y}));
  REPLICAD_RETURN_IF_ERROR(CheckTransposedPads(spec, conv));
  ConvGeometry geometry;
  geometry.pads = conv.pads_begin;
  geometry.strides = conv.strides;
  geometry.dilations = conv.dilations;
  geometry.group = conv.group;

  // cuDNN's convolution runs from ONNX's output Y to its input X.
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<ConvDescriptors> d,
                            MakeConvDescriptors(spec, context, y, w, x, geometry));
  REPLICAD_ASSIGN_OR_RETURN(ConvAlgorithm choice,
                            ChooseConvAlgorithm(spec, context, *d, ConvDirection::kBackwardData));
  auto kernel = std::make_unique<CudnnConvKernel>(context, std::move(d), /*transposed=*/true,
                                                  choice, /*fused_sum=*/false, CudaUnary{},
                                                  NumElements(spec.outputs[0].shape));
  if (HasInput(spec, 2)) REPLICAD_RETURN_IF_ERROR(kernel->InitBias(y[1], 4));
  return kernel;
}

}  // namespace replicad
