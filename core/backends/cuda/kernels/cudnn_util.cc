#include "core/backends/cuda/kernels/cudnn_util.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {

NdDims ToNdDims(const Shape& shape) {
  NdDims nd;
  nd.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = nd.rank - 1; d >= 0; --d) {
    nd.dims[d] = static_cast<int>(shape[d]);
    nd.strides[d] = static_cast<int>(stride);
    stride *= shape[d];
  }
  return nd;
}

Dims4 ToDims4(const Shape& shape) { return {shape[0], shape[1], shape[2], shape[3]}; }

absl::Status SetCudnnTensor(const std::string& device, CudnnTensorDescriptor& desc,
                            const Dims4& dims, cudnnDataType_t type) {
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateTensorDescriptor(desc.receive()));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, type,
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

absl::Status SetCudnnTensorNd(const std::string& device, CudnnTensorDescriptor& desc,
                              const Shape& dims) {
  const NdDims nd = ToNdDims(dims);
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateTensorDescriptor(desc.receive()));
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnSetTensorNdDescriptor(desc.get(), CUDNN_DATA_FLOAT,
                                                                   nd.rank, nd.dims, nd.strides));
  return absl::OkStatus();
}

}  // namespace replicad
