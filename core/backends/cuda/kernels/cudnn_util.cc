#include "core/backends/cuda/kernels/cudnn_util.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/ops/op_util.h"

namespace replicad {

absl::Status SetCudnnTensor(const std::string& device, CudnnTensorDescriptor& desc,
                            const Dims4& dims) {
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateTensorDescriptor(desc.receive()));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                         static_cast<int>(dims[0]), static_cast<int>(dims[1]),
                                         static_cast<int>(dims[2]), static_cast<int>(dims[3])));
  return absl::OkStatus();
}

absl::Status CheckFitsCudnn(const KernelSpec& spec, absl::string_view subject,
                            std::initializer_list<Dims4> tensors) {
  for (const Dims4& dims : tensors) {
    int64_t elements = 1;
    for (int64_t d : dims) elements *= d;
    if (elements > INT_MAX) {
      return NodeUnimplemented(spec,
                               absl::StrCat(subject, " tensors of at most ", INT_MAX, " elements"));
    }
  }
  return absl::OkStatus();
}

}  // namespace replicad
