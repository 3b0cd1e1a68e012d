#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_CONVOLUTION_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_CONVOLUTION_H_

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/backends/cuda/kernels/cudnn_util.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/device/kernel.h"
#include "core/ops/conv_attributes.h"

namespace replicad {

// Internal to the CUDA kernels: what the cuDNN convolutions share: Conv and
// ConvTranspose (cudnn_conv_kernel.cc), the 16-bit Conv of a chain
// (cudnn_conv16_kernel.cc), ConvGradData and ConvGradFilter
// (cudnn_conv_grad_kernel.cc). All of it runs at build time, on the slot's
// host thread.

// A cross-correlation over `kSpatialDims` dims as cuDNN takes it (2-D, or
// 3-D through its Nd descriptors): one pad per spatial dim, the same on both
// sides; dilations count as ONNX's (1 = dense).
template <size_t kSpatialDims>
struct ConvGeometryOf {
  std::array<int64_t, kSpatialDims> pads{};
  std::array<int64_t, kSpatialDims> strides{};
  std::array<int64_t, kSpatialDims> dilations{};
  int64_t group = 1;
};
using ConvGeometry = ConvGeometryOf<2>;
using ConvGeometry3d = ConvGeometryOf<3>;

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
// packed NCHW of `io_type` (float32, or 16 bits for a chain of 16-bit
// convolutions: cudnn_conv16_kernel.cc). The dims and the type are kept for
// the algorithm cache's key.
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
  // The tensors' and the filter's type; the sums are float32 whatever it is.
  cudnnDataType_t io_type = CUDNN_DATA_FLOAT;
};

// Makes the descriptors in ProductMathOf(spec, context)'s math: FMA (no
// tensor cores) for fp32, cuDNN's default (TF32 on float32) for tf32 and
// bf16, tensor-op math allowing float32 down to float16 for fp16; with a 16-bit `io_type`
// (CUDNN_DATA_HALF or CUDNN_DATA_BFLOAT16) tensor-op math on those, summing in float32
// (cuDNN's PSEUDO_HALF and PSEUDO_BFLOAT16 configurations). Internal naming the node when
// cuDNN's forward convolution does not map x's dims to y's; the failing call's Status otherwise.
// The dims must pass CheckFitsCudnn.
absl::StatusOr<std::unique_ptr<ConvDescriptors>> MakeConvDescriptors(
    const KernelSpec& spec, const CudaKernelContext& context, const Dims4& x, const Dims4& w,
    const Dims4& y, const ConvGeometry& geometry, cudnnDataType_t io_type = CUDNN_DATA_FLOAT);

// A 3-D Conv's geometry (X [N, C, D, H, W], W [M, C/group, kD, kH, kW]):
// padding pads_begin on both sides must give the node's output, as
// SymmetricConvGeometry's; Unimplemented naming the node and its pads
// otherwise.
absl::StatusOr<ConvGeometry3d> SymmetricConv3dGeometry(const KernelSpec& spec,
                                                       const Conv3dAttributes& conv);

// MakeConvDescriptors for a 3-D convolution from x [N, C, D, H, W] through
// the filter w [K, C/group, kD, kH, kW] to y, in cuDNN's orientation (a 3-D
// ConvTranspose's output is this x, its input this y), through cuDNN's Nd
// descriptors, with the dims and geometry in nd_key. Unimplemented naming
// the node when a tensor has more than INT_MAX elements; Internal when
// cuDNN's forward convolution does not map x's dims to y's.
absl::StatusOr<std::unique_ptr<ConvDescriptors>> MakeConv3dDescriptors(
    const KernelSpec& spec, const CudaKernelContext& context, const Shape& x, const Shape& w,
    const Shape& y, const ConvGeometry3d& geometry);

// 16-bit convolutions (cudnn_conv16_kernel.cc). A 2-D Conv of a model
// served in fp16 or bf16 whose output only other such convolutions read (the
// node marked kOutputPrecisionAttribute, the plan keeping it native) hands
// it over as packed NCHW 16-bit values, in the layout of that name
// (Kernel::native_output_layout); its readers find it in
// KernelSpec::input_layouts and read it as it is.
inline constexpr char kCudaFloat16Layout[] = "cuda:nchw:float16";
inline constexpr char kCudaBFloat16Layout[] = "cuda:nchw:bfloat16";

// Whether `spec` (a Conv) is for MakeCudaConv16Kernel: an input arrives in a
// 16-bit layout (ArrivesInSixteenBits), or it is a 2-D convolution
// computing in fp16 or bf16 that writes its output so (a chain's).
bool TakesSixteenBitConv(const KernelSpec& spec, const CudaKernelContext& context);
bool ArrivesInSixteenBits(const KernelSpec& spec);

// The Conv in 16 bits: X (converted per run where it arrives in float32) and
// W (converted once where it is an initializer) read by cuDNN in float16 or
// bfloat16 with float32 sums; the bias, fused residual (either type) and
// activation in one float32 pass that writes the output in 16 bits where
// the plan keeps it so, else float32. Internal naming the node when an input
// arrives in 16 bits but the node is not a 2-D fp16 or bf16 convolution;
// MakeConvDescriptors' and ChooseConvAlgorithm's errors otherwise.
KernelOrStatus MakeCudaConv16Kernel(const KernelSpec& spec, CudaKernelContext& context);

// Forward: y from x and w. Backward data: dx (x's dims) from dy and w.
// Backward filter: dw (w's dims) from x and dy.
enum class ConvDirection { kForward, kBackwardData, kBackwardFilter };

// An algorithm of its direction (cudnnConvolutionFwdAlgo_t,
// cudnnConvolutionBwdDataAlgo_t or cudnnConvolutionBwdFilterAlgo_t) and the
// workspace it needs under the descriptors' math type.
struct ConvAlgorithm {
  int algorithm = 0;
  size_t workspace_bytes = 0;
  // For 16-bit tensors, the math type cuDNN's heuristics gave the algorithm,
  // which ChooseConvAlgorithm sets on the descriptor (cuDNN picks tensor-core
  // kernels by both, as PyTorch sets them); float32 keeps the descriptor's.
  bool sets_math_type = false;
  cudnnMathType_t math_type = CUDNN_DEFAULT_MATH;
};

// Picks the algorithm for `direction` among cuDNN's heuristic candidates
// (the *_v7 queries, best first) that run within context.max_workspace_bytes:
// the first deterministic one (bitwise repeatable: the backward directions'
// atomics-based algorithms are not) or, when none of those fits, the first.
// Chosen once per device, direction, shapes, geometry, math, tensor type and
// limit for the whole process (plans are made per slot and batch size). With
// 16-bit tensors it also sets the choice's math type on d.conv. Unimplemented
// naming the node when no candidate fits; the failing call's Status
// otherwise.
absl::StatusOr<ConvAlgorithm> ChooseConvAlgorithm(const KernelSpec& spec,
                                                  const CudaKernelContext& context,
                                                  const ConvDescriptors& d,
                                                  ConvDirection direction);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDNN_CONVOLUTION_H_
