// Convolution backward on cuDNN: the data gradient (replicad.ConvGradData)
// and the filter and bias gradients (replicad.ConvGradFilter) of Conv, with
// the forward kernel's descriptors, geometry and algorithm chooser
// (cudnn_convolution.h), so both directions accept exactly the forms Conv does.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cudnn_convolution.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// What both gradients share: the node's X [N, C, H, W], W [M, C/group, kH,
// kW] and dY [N, M, OH, OW] (inputs 0, 1, 2, as the forward Conv's X, W and
// output), checked for cuDNN and resolved to its symmetric geometry.
struct GradShapes {
  Dims4 x{};
  Dims4 w{};
  Dims4 y{};
  ConvGeometry geometry;
};

absl::StatusOr<GradShapes> ParseGradShapes(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(ForwardInputs(spec, 2)));
  GradShapes shapes;
  shapes.x = ToDims4(spec.inputs[0]->shape);
  shapes.w = ToDims4(spec.inputs[1]->shape);
  shapes.y = ToDims4(spec.inputs[2]->shape);
  REPLICAD_RETURN_IF_ERROR(
      CheckFitsCudnn(spec, "cuDNN convolutions take", {shapes.x, shapes.w, shapes.y}));
  REPLICAD_ASSIGN_OR_RETURN(shapes.geometry,
                            SymmetricConvGeometry(spec, conv, {shapes.x[2], shapes.x[3]}));
  return shapes;
}

// cuDNN rejects tensors with a zero dim (BAD_PARAM), and a batch of zero rows
// reaches a replica whose slice is empty. Every gradient is a sum over dY's
// elements, so without any the outputs are zeros. With dY non-empty but X
// empty (no input channels, or only padding) dB would still be dY's sum:
// that form is not worth a kernel of its own.
absl::Status CheckEmptyForm(const KernelSpec& spec, const GradShapes& shapes) {
  if (Elements(shapes.y) != 0 && (Elements(shapes.x) == 0 || Elements(shapes.w) == 0)) {
    return NodeUnimplemented(spec,
                             "a convolution gradient with an empty X or W and a non-empty "
                             "dY is not implemented on cuDNN");
  }
  return absl::OkStatus();
}

// dX = cudnnConvolutionBackwardData(W, dY), or zeros when dY is empty.
class CudnnConvGradDataKernel : public Kernel {
 public:
  CudnnConvGradDataKernel(const CudaKernelContext& context,
                          std::unique_ptr<ConvDescriptors> descriptors, ConvAlgorithm choice,
                          size_t dx_bytes)
      : device_(context.device),
        cudnn_(context.cudnn),
        stream_(context.stream),
        d_(std::move(descriptors)),
        choice_(choice),
        dx_bytes_(dx_bytes) {}

  size_t workspace_bytes() const override { return choice_.workspace_bytes; }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (d_ == nullptr) {
      REPLICAD_CUDA_RETURN_IF_ERROR(device_, cudaMemsetAsync(outputs[0], 0, dx_bytes_, stream_));
      return absl::OkStatus();
    }
    const float one = 1.0f;
    const float zero = 0.0f;
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudnnConvolutionBackwardData(
                     cudnn_, &one, d_->w.get(), inputs[1], d_->y.get(), inputs[2], d_->conv.get(),
                     static_cast<cudnnConvolutionBwdDataAlgo_t>(choice_.algorithm), workspace_,
                     choice_.workspace_bytes, &zero, d_->x.get(), outputs[0]));
    return absl::OkStatus();
  }

 private:
  std::string device_;
  cudnnHandle_t cudnn_;
  cudaStream_t stream_;
  std::unique_ptr<ConvDescriptors> d_;  // nullptr when dY is empty.
  ConvAlgorithm choice_;
  size_t dx_bytes_;
  void* workspace_ = nullptr;
};

// dW = cudnnConvolutionBackwardFilter(X, dY) and dB = dY summed over all but
// its channel dim (cudnnConvolutionBackwardBias), or zeros when dY is empty.
class CudnnConvGradFilterKernel : public Kernel {
 public:
  CudnnConvGradFilterKernel(const CudaKernelContext& context,
                            std::unique_ptr<ConvDescriptors> descriptors, ConvAlgorithm choice,
                            size_t dw_bytes, size_t db_bytes)
      : device_(context.device),
        cudnn_(context.cudnn),
        stream_(context.stream),
        d_(std::move(descriptors)),
        choice_(choice),
        dw_bytes_(dw_bytes),
        db_bytes_(db_bytes) {}

  // Called once d_ is set: dB's descriptor, [1, M, 1, 1].
  absl::Status Init(int64_t out_channels) {
    return SetCudnnTensor(device_, bias_, {1, out_channels, 1, 1});
  }

  size_t workspace_bytes() const override { return choice_.workspace_bytes; }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (d_ == nullptr) {
      REPLICAD_CUDA_RETURN_IF_ERROR(device_, cudaMemsetAsync(outputs[0], 0, dw_bytes_, stream_));
      REPLICAD_CUDA_RETURN_IF_ERROR(device_, cudaMemsetAsync(outputs[1], 0, db_bytes_, stream_));
      return absl::OkStatus();
    }
    const float one = 1.0f;
    const float zero = 0.0f;
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudnnConvolutionBackwardFilter(
                     cudnn_, &one, d_->x.get(), inputs[0], d_->y.get(), inputs[2], d_->conv.get(),
                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice_.algorithm), workspace_,
                     choice_.workspace_bytes, &zero, d_->w.get(), outputs[0]));
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudnnConvolutionBackwardBias(cudnn_, &one, d_->y.get(), inputs[2], &zero,
                                              bias_.get(), outputs[1]));
    return absl::OkStatus();
  }

 private:
  std::string device_;
  cudnnHandle_t cudnn_;
  cudaStream_t stream_;
  std::unique_ptr<ConvDescriptors> d_;  // nullptr when dY is empty.
  ConvAlgorithm choice_;
  size_t dw_bytes_;
  size_t db_bytes_;
  CudnnTensorDescriptor bias_;
  void* workspace_ = nullptr;
};

}  // namespace

KernelOrStatus MakeCudaConvGradDataKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GradShapes shapes, ParseGradShapes(spec));
  REPLICAD_RETURN_IF_ERROR(CheckEmptyForm(spec, shapes));
  const size_t dx_bytes = static_cast<size_t>(Elements(shapes.x)) * sizeof(float);
  if (Elements(shapes.y) == 0) {
    return std::make_unique<CudnnConvGradDataKernel>(context, nullptr, ConvAlgorithm{}, dx_bytes);
  }
  REPLICAD_ASSIGN_OR_RETURN(
      std::unique_ptr<ConvDescriptors> d,
      MakeConvDescriptors(spec, context, shapes.x, shapes.w, shapes.y, shapes.geometry));
  REPLICAD_ASSIGN_OR_RETURN(ConvAlgorithm choice,
                            ChooseConvAlgorithm(spec, context, *d, ConvDirection::kBackwardData));
  return std::make_unique<CudnnConvGradDataKernel>(context, std::move(d), choice, dx_bytes);
}

KernelOrStatus MakeCudaConvGradFilterKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GradShapes shapes, ParseGradShapes(spec));
  REPLICAD_RETURN_IF_ERROR(CheckEmptyForm(spec, shapes));
  const size_t dw_bytes = static_cast<size_t>(Elements(shapes.w)) * sizeof(float);
  const size_t db_bytes = static_cast<size_t>(shapes.w[0]) * sizeof(float);
  if (Elements(shapes.y) == 0) {
    return std::make_unique<CudnnConvGradFilterKernel>(context, nullptr, ConvAlgorithm{}, dw_bytes,
                                                       db_bytes);
  }
  REPLICAD_ASSIGN_OR_RETURN(
      std::unique_ptr<ConvDescriptors> d,
      MakeConvDescriptors(spec, context, shapes.x, shapes.w, shapes.y, shapes.geometry));
  REPLICAD_ASSIGN_OR_RETURN(ConvAlgorithm choice,
                            ChooseConvAlgorithm(spec, context, *d, ConvDirection::kBackwardFilter));
  auto kernel = std::make_unique<CudnnConvGradFilterKernel>(context, std::move(d), choice, dw_bytes,
                                                            db_bytes);
  REPLICAD_RETURN_IF_ERROR(kernel->Init(shapes.w[0]));
  return kernel;
}

}  // namespace replicad
