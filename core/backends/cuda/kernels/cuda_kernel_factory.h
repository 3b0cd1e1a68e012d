#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDA_KERNEL_FACTORY_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDA_KERNEL_FACTORY_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/backends/cuda/cublas_library.h"
#include "core/device/kernel.h"
#include "core/model/compute_precision.h"
#include "core/tensor/buffer.h"

namespace replicad {

// What the kernels of one CUDA slot share: its stream and library handles
// (bound to that stream), settings, and a way to get device memory for a
// kernel's own tables. It must outlive every kernel made with it. Kernels are
// made and run on the slot's host thread, which has made the slot's GPU
// current (cudaSetDevice), one at a time.
struct CudaKernelContext {
  std::string device;  // "cuda:0", for messages.
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  const CublasLibrary* cublas_library = nullptr;  // Set with `cublas`.
  // TF32 tensor cores for float32 convolutions and matrix products: faster,
  // with a 10-bit mantissa for the products (see docs/status.md, "Numerics").
  bool tf32 = false;
  // Convolution algorithms that give the same bits on every run first
  // (CudaSlotOptions::cudnn_deterministic); off: cuDNN's fastest.
  bool deterministic_convolutions = true;
  // The most scratch memory a cuDNN algorithm may ask for (bytes); faster
  // algorithms that need more are passed over.
  size_t max_workspace_bytes = size_t{256} << 20;
  // Device memory of the slot (the caching allocator), for tables a kernel
  // keeps (index maps, packed parameters). Fails as Device::Allocate does.
  std::function<absl::StatusOr<std::shared_ptr<Buffer>>(size_t)> allocate;
};

// What a product kernel (convolution, Gemm, MatMul) may round its float32
// operands to inside, on tensor cores with float32 sums; its tensors stay
// float32 either way (core/model/compute_precision.h):
// One of ComputePrecision's:
//  - kFloat16: the node marked "fp16" (a model served with --precision fp16):
//    cuBLAS's CUBLAS_COMPUTE_32F_FAST_16F, cuDNN's
//    CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION; a chain's 2-D convolutions read
//    and write float16 (cudnn_conv16_kernel.cc);
//  - kBFloat16: marked "bf16": cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF; a
//    chain's 2-D convolutions read and write bfloat16; cuDNN converts
//    float32 to float16 only, so another bf16 convolution computes in TF32
//    (more mantissa than bfloat16's, float32's range);
//  - kTensorFloat32: marked "tf32", or the slot's --tf32;
//  - kFloat32: none of these (no tensor cores).
ComputePrecision ProductMathOf(const KernelSpec& spec, const CudaKernelContext& context);

// Builds the CUDA kernel for spec (outputs already inferred by the op's shape
// rule). Descriptors, algorithm choices and tables are made here; Run only
// enqueues work on context.stream and returns without waiting, so outputs are
// complete in stream order, not when Run returns (except where a kernel must
// bring values to the host: the indices that are data of Gather,
// GatherElements, GatherND, ScatterElements and ScatterND, RoiAlign's
// batch_indices and the loss's labels, to check them; batch statistics
// summed across slots). Run never allocates.
//
// Fails with Unimplemented naming the op and the node when this backend lacks
// the op or the form; InvalidArgument (from the op's shape rule) when spec is
// malformed; the failing call's Status (cuda_call.h) otherwise.
absl::StatusOr<std::unique_ptr<Kernel>> MakeCudaKernel(const KernelSpec& spec,
                                                       CudaKernelContext& context);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUDA_KERNEL_FACTORY_H_
