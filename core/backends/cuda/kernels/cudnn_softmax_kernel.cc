#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cudnn_util.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/ops/op_util.h"
#include "core/ops/softmax_attributes.h"

namespace replicad {
namespace {

// Softmax or LogSoftmax along the middle dim of [outer, axis_size, inner],
// which cuDNN sees as [N, C, H, 1] normalized over C: per row (INSTANCE)
// when inner is 1, per (n, h) position (CHANNEL) otherwise.
class CudnnSoftmaxKernel : public Kernel {
 public:
  CudnnSoftmaxKernel(const CudaKernelContext& context, cudnnSoftmaxAlgorithm_t algorithm,
                     cudnnSoftmaxMode_t mode)
      : device_(context.device), cudnn_(context.cudnn), algorithm_(algorithm), mode_(mode) {}

  absl::Status Init(const Dims4& dims) { return SetCudnnTensor(device_, data_, dims); }

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float one = 1.0f;
    const float zero = 0.0f;
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
  CudnnTensorDescriptor data_;
};

}  // namespace

KernelOrStatus MakeCudaSoftmaxKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.op_type != "Softmax" && spec.op_type != "LogSoftmax") {
    return NodeUnimplemented(spec, "the cuDNN softmax kernel has no such op");
  }
  REPLICAD_ASSIGN_OR_RETURN(SoftmaxLayout layout, ParseSoftmaxLayout(spec));
  const Dims4 dims = {layout.outer, layout.axis_size, layout.inner, 1};
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN softmax takes", {dims}));
  // ACCURATE (and LOG) subtract each row's maximum before exponentiating, so
  // large logits do not overflow.
  const cudnnSoftmaxAlgorithm_t algorithm =
      spec.op_type == "LogSoftmax" ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
  const cudnnSoftmaxMode_t mode =
      layout.inner == 1 ? CUDNN_SOFTMAX_MODE_INSTANCE : CUDNN_SOFTMAX_MODE_CHANNEL;
  auto kernel = std::make_unique<CudnnSoftmaxKernel>(context, algorithm, mode);
  REPLICAD_RETURN_IF_ERROR(kernel->Init(dims));
  return kernel;
}

}  // namespace replicad
