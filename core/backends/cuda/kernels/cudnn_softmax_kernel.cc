#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cudnn_util.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/softmax_attributes.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

// Softmax or LogSoftmax along the middle dim of [outer, axis_size, inner],
// which cuDNN sees as [N, C, H, 1] normalized over C: per row (INSTANCE)
// when inner is 1, per (n, h) position (CHANNEL) otherwise. The backward
// form reads (Y, dY) and writes dX on the same layout: with the ACCURATE
// algorithm dX = Y (dY - sum(dY Y)), with LOG dX = dY - exp(Y) sum(dY), sums
// along C, as replicad.SoftmaxGrad and replicad.LogSoftmaxGrad define them.
class CudnnSoftmaxKernel : public Kernel {
 public:
  CudnnSoftmaxKernel(const CudaKernelContext& context, cudnnSoftmaxAlgorithm_t algorithm,
                     cudnnSoftmaxMode_t mode, bool backward)
      : device_(context.device),
        cudnn_(context.cudnn),
        algorithm_(algorithm),
        mode_(mode),
        backward_(backward) {}

  absl::Status Init(const Dims4& dims) { return SetCudnnTensor(device_, data_, dims); }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float one = 1.0f;
    const float zero = 0.0f;
    if (backward_) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, cudnnSoftmaxBackward(cudnn_, algorithm_, mode_, &one, data_.get(), inputs[0],
                                        data_.get(), inputs[1], &zero, data_.get(), outputs[0]));
      return absl::OkStatus();
    }
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudnnSoftmaxForward(cudnn_, algorithm_, mode_, &one, data_.get(), inputs[0], &zero,
                                     data_.get(), outputs[0]));
    return absl::OkStatus();
  }

 private:
  std::string device_;
  cudnnHandle_t cudnn_;
  cudnnSoftmaxAlgorithm_t algorithm_;
  cudnnSoftmaxMode_t mode_;
  bool backward_;
  CudnnTensorDescriptor data_;
};

// `forward` is the Softmax or LogSoftmax node whose layout applies (for the
// gradients, the node with only Y as its input); `log` picks LogSoftmax.
KernelOrStatus MakeSoftmaxKernel(const KernelSpec& spec, const KernelSpec& forward, bool log,
                                 bool backward, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(SoftmaxLayout layout, ParseSoftmaxLayout(forward));
  const Dims4 dims = {layout.outer, layout.axis_size, layout.inner, 1};
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN softmax takes", {dims}));
  // ACCURATE (and LOG) subtract each row's maximum before exponentiating, so
  // large logits do not overflow.
  const cudnnSoftmaxAlgorithm_t algorithm = log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
  const cudnnSoftmaxMode_t mode =
      layout.inner == 1 ? CUDNN_SOFTMAX_MODE_INSTANCE : CUDNN_SOFTMAX_MODE_CHANNEL;
  auto kernel = std::make_unique<CudnnSoftmaxKernel>(context, algorithm, mode, backward);
  REPLICAD_RETURN_IF_ERROR(kernel->Init(dims));
  return kernel;
}

}  // namespace

KernelOrStatus MakeCudaSoftmaxKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.op_type != "Softmax" && spec.op_type != "LogSoftmax") {
    return NodeUnimplemented(spec, "the cuDNN softmax kernel has no such op");
  }
  return MakeSoftmaxKernel(spec, spec, spec.op_type == "LogSoftmax", /*backward=*/false, context);
}

KernelOrStatus MakeCudaSoftmaxGradKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.op_type != kSoftmaxGrad && spec.op_type != kLogSoftmaxGrad) {
    return NodeUnimplemented(spec, "the cuDNN softmax gradient kernel has no such op");
  }
  // The forward node's layout rule applies to Y (input 0).
  return MakeSoftmaxKernel(spec, ForwardInputs(spec, 1), spec.op_type == kLogSoftmaxGrad,
                           /*backward=*/true, context);
}

}  // namespace replicad
