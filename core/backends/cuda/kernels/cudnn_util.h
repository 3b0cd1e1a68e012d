#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_UTIL_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_UTIL_H_

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// Internal to the CUDA kernels: what the cuDNN kernels (cudnn_*_kernel.cc)
// share: descriptors and tensors. Convolutions' own: cudnn_convolution.h.
// All of it runs at build time, on the slot's host thread.

// Owns one cuDNN descriptor, destroying it (when made) with the owner.
// Destroying one only frees host memory, so its status has no one to inform.
template <typename T, cudnnStatus_t (*kDestroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  ~CudnnDescriptor() {
    if (desc_ != nullptr) kDestroy(desc_);
  }

  // nullptr until a cudnnCreate*Descriptor call has written to receive().
  T get() const { return desc_; }
  // Where a cudnnCreate*Descriptor call writes the descriptor it makes.
  T* receive() { return &desc_; }

 private:
  T desc_ = nullptr;
};

using CudnnTensorDescriptor =
    CudnnDescriptor<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using CudnnFilterDescriptor =
    CudnnDescriptor<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using CudnnConvolutionDescriptor =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using CudnnPoolingDescriptor =
    CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

// [N, C, H, W], as cuDNN's 4-d descriptors take a tensor's dims.
using Dims4 = std::array<int64_t, 4>;

// The dims of a rank-4 shape (the caller has checked the rank).
Dims4 ToDims4(const Shape& shape);
// The elements of a tensor of `dims`.
inline int64_t Elements(const Dims4& dims) { return dims[0] * dims[1] * dims[2] * dims[3]; }

// Creates `desc` (which must not hold a descriptor yet) and sets it to a
// packed NCHW tensor of `dims` and `type` (float32 unless said). Fails with
// the failing cuDNN call's Status (cuda_call.h) naming `device`; a
// descriptor created before the failure stays in `desc`, which destroys it.
// `dims` must pass CheckFitsCudnn.
absl::Status SetCudnnTensor(const std::string& device, CudnnTensorDescriptor& desc,
                            const Dims4& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT);

// OK when each of `tensors` has at most INT_MAX elements: cuDNN's legacy
// descriptors take int dims and strides, and its kernels index with them
// (larger tensors would need splitting along N, which no kernel does).
// Otherwise Unimplemented "<node>: <subject> tensors of at most 2147483647
// elements", where `subject` names the cuDNN operation with its verb
// ("cuDNN pooling takes").
absl::Status CheckFitsCudnn(const KernelSpec& spec, absl::string_view subject,
                            std::initializer_list<Dims4> tensors);

// Creates `desc` (as SetCudnnTensor) for a packed float32 tensor of any
// rank from 3 to 8 (cuDNN's Nd descriptors), e.g. a 3-D bias [1, C, 1, 1, 1].
absl::Status SetCudnnTensorNd(const std::string& device, CudnnTensorDescriptor& desc,
                              const Shape& dims);

// The int dims and packed strides of `shape` (rank <= 8), as cuDNN's Nd
// descriptors take them.
struct NdDims {
  int rank = 0;
  int dims[8] = {};
  int strides[8] = {};
};
NdDims ToNdDims(const Shape& shape);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_UTIL_H_
