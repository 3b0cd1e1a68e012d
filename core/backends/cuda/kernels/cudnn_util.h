#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_UTIL_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_UTIL_H_

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/device/kernel.h"
#include "core/ops/conv_attributes.h"

namespace replicad {

// Internal to the CUDA kernels: what the cuDNN kernels (cudnn_*_kernel.cc)
// share. All of it runs at build time, on the slot's host thread.

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
// packed NCHW float32 tensor of `dims`. Fails with the failing cuDNN call's
// Status (cuda_call.h) naming `device`; a descriptor created before the
// failure stays in `desc`, which destroys it. `dims` must pass CheckFitsCudnn.
absl::Status SetCudnnTensor(const std::string& device, CudnnTensorDescriptor& desc,
                            const Dims4& dims);

// OK when each of `tensors` has at most INT_MAX elements: cuDNN's legacy
// descriptors take int dims and strides, and its kernels index with them
// (larger tensors would need splitting along N, which no kernel does).
// Otherwise Unimplemented "<node>: <subject> tensors of at most 2147483647
// elements", where `subject` names the cuDNN operation with its verb
// ("cuDNN pooling takes").
absl::Status CheckFitsCudnn(const KernelSpec& spec, absl::string_view subject,
                            std::initializer_list<Dims4> tensors);

// Convolutions: Conv and ConvTranspose (cudnn_conv_kernel.cc), ConvGradData
// and ConvGradFilter (cudnn_conv_grad_kernel.cc).

// A 2-D cross-correlation as cuDNN takes it: one pad per spatial dim (H, W),
// the same on both sides; dilations count as ONNX's (1 = dense).
struct ConvGeometry {
  std::array<int64_t, 2> pads{};
  std::array<int64_t, 2> strides{};
  std::array<int64_t, 2> dilations{};
  int64_t group = 1;
};

// Conv's geometry (for its forward and both gradients) over X of spatial
// size `input` (H, W). Padding pads_begin on both sides gives the node's
// windows whenever it gives the node's output size (the windows start at
// the same offsets, and padding reads zeros either way); Unimplemented naming
// the node and its pads otherwise.
absl::StatusOr<ConvGeometry> SymmetricConvGeometry(const KernelSpec& spec,
                                                   const ConvAttributes& conv,
                                                   std::array<int64_t, 2> input);

// The descriptors of one convolution from x through the filter w to y, in
// cuDNN's orientation (ConvTranspose's output is this x, its input this y),
// packed NCHW float32. The dims are kept for the algorithm cache's key.
struct ConvDescriptors {
  Dims4 x_dims{};
  Dims4 w_dims{};
  Dims4 y_dims{};
  ConvGeometry geometry;
  // A 3-D convolution's (MakeConv3dDescriptors) dims and geometry for the
  // cache's key, in place of the four fields above; empty for 2-D.
  std::string nd_key;
  CudnnTensorDescriptor x;
  CudnnTensorDescriptor y;
  CudnnFilterDescriptor w;
  CudnnConvolutionDescriptor conv;
  // ProductMathOf: the math type, and the algorithm cache's key.
  ComputePrecision math = ComputePrecision::kFloat32;
};

// Makes the descriptors in ProductMathOf(spec, context)'s math: FMA (no
// tensor cores) for fp32, cuDNN's default (TF32 on float32) for tf32 and
// bf16, tensor-op math allowing float32 down to float16 for fp16. Internal naming the node when
// cuDNN's forward convolution does not map x's dims to y's; the failing call's Status otherwise.
// The dims must pass CheckFitsCudnn.
absl::StatusOr<std::unique_ptr<ConvDescriptors>> MakeConvDescriptors(
    const KernelSpec& spec, const CudaKernelContext& context, const Dims4& x, const Dims4& w,
    const Dims4& y, const ConvGeometry& geometry);

// A 3-D convolution of X [N, C, D, H, W] by W [M, C/group, kD, kH, kW] to
// Y as cuDNN's Nd descriptors take it (forward only): one pad per spatial
// dim on both sides, which must give the node's output (Unimplemented
// naming the node and its pads otherwise, as SymmetricConvGeometry), the
// math as MakeConvDescriptors', and the dims in nd_key. Each tensor must
// have at most INT_MAX elements (Unimplemented otherwise).
absl::StatusOr<std::unique_ptr<ConvDescriptors>> MakeConv3dDescriptors(
    const KernelSpec& spec, const CudaKernelContext& context, const Conv3dAttributes& conv);

// Creates `desc` (as SetCudnnTensor) for a packed float32 tensor of any
// rank from 3 to 8 (cuDNN's Nd descriptors), e.g. a 3-D bias [1, C, 1, 1, 1].
absl::Status SetCudnnTensorNd(const std::string& device, CudnnTensorDescriptor& desc,
                              const Shape& dims);

// Forward: y from x and w. Backward data: dx (x's dims) from dy and w.
// Backward filter: dw (w's dims) from x and dy.
enum class ConvDirection { kForward, kBackwardData, kBackwardFilter };

// An algorithm of its direction (cudnnConvolutionFwdAlgo_t,
// cudnnConvolutionBwdDataAlgo_t or cudnnConvolutionBwdFilterAlgo_t) and the
// workspace it needs under the descriptors' math type.
struct ConvAlgorithm {
  int algorithm = 0;
  size_t workspace_bytes = 0;
};

// Picks the algorithm for `direction` among cuDNN's heuristic candidates
// (the *_v7 queries, best first) that run within context.max_workspace_bytes:
// the first deterministic one (bitwise repeatable: the backward directions'
// atomics-based algorithms are not) or, when none of those fits, the first.
// Chosen once per device, direction, shapes, geometry, math and limit for
// the whole process (plans are made per slot and batch size). Unimplemented
// naming the node when no candidate fits; the failing call's Status
// otherwise.
absl::StatusOr<ConvAlgorithm> ChooseConvAlgorithm(const KernelSpec& spec,
                                                  const CudaKernelContext& context,
                                                  const ConvDescriptors& d,
                                                  ConvDirection direction);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_UTIL_H_
