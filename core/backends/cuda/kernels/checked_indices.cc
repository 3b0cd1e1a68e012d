#include "core/backends/cuda/kernels/checked_indices.h"

#include <utility>

#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {

absl::StatusOr<CheckedIndices> CheckedIndices::Make(const KernelSpec& spec,
                                                    CudaKernelContext& context, int input,
                                                    int64_t count, Check check) {
  const Tensor* constant = ConstantInput(spec, input);
  if (constant == nullptr) return CheckedIndices(std::move(check), nullptr, count);
  REPLICAD_RETURN_IF_ERROR(check(constant->data<int64_t>()));
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                            UploadToDevice(context, constant->data<int64_t>(),
                                           static_cast<size_t>(count) * sizeof(int64_t)));
  return CheckedIndices(std::move(check), std::move(buffer), 0);
}

absl::StatusOr<const int64_t*> CheckedIndices::Get(const CudaKernelContext& context,
                                                   const void* data) {
  if (constant_ != nullptr) return static_cast<const int64_t*>(constant_->data());
  if (!host_.empty()) {
    REPLICAD_CUDA_RETURN_IF_ERROR(
        context.device, cudaMemcpyAsync(host_.data(), data, host_.size() * sizeof(int64_t),
                                        cudaMemcpyDeviceToHost, context.stream));
    REPLICAD_CUDA_RETURN_IF_ERROR(context.device, cudaStreamSynchronize(context.stream));
    REPLICAD_RETURN_IF_ERROR(check_(host_.data()));
  }
  return static_cast<const int64_t*>(data);
}

}  // namespace replicad
