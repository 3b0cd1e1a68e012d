#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUBLAS_RUNNER_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUBLAS_RUNNER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/backends/cuda/cublas_library.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/model/compute_precision.h"

namespace replicad {

// Internal to the CUDA kernels: what the cuBLAS products (Gemm, MatMul,
// Einsum) share: the slot's cuBLAS handle set up for a kernel's math, and
// the fused activation applied in place afterwards. Row-major tensors are
// read by cuBLAS (column-major) as their transposes: see
// cublas_matmul_kernel.cc.
class CublasRunner {
 public:
  CublasRunner(const CudaKernelContext& context, ComputePrecision math, CudaUnary activation)
      : device_(context.device),
        cublas_(context.cublas),
        library_(*context.cublas_library),
        stream_(context.stream),
        math_(math == ComputePrecision::kTensorFloat32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                       : CUBLAS_DEFAULT_MATH),
        compute_(ReducedCompute(math)),
        activation_(activation) {}

  const std::string& device() const { return device_; }
  cublasHandle_t cublas() const { return cublas_; }
  const CublasLibrary& library() const { return library_; }
  cudaStream_t stream() const { return stream_; }

  // The handle is shared by every kernel of the slot and keeps its math and
  // pointer modes, so each product sets them first.
  absl::Status PrepareHandle() {
    REPLICAD_CUDA_RETURN_IF_ERROR(device_, library_.SetMathMode(cublas_, math_));
    REPLICAD_CUDA_RETURN_IF_ERROR(device_,
                                  library_.SetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
    return absl::OkStatus();
  }

  // With K = 0 the products are empty sums: zeros, without asking cuBLAS to
  // read operands whose leading dims would be 0.
  absl::Status Zero(float* y, int64_t elements) {
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, cudaMemsetAsync(y, 0, static_cast<size_t>(elements) * sizeof(float), stream_));
    return absl::OkStatus();
  }

  // Column-major C = alpha * op(A) op(B) + beta * C on float32 matrices:
  // Sgemm, or with an fp16 or bf16 ProductMathOf GemmEx computing on tensor
  // cores from operands rounded so (CUBLAS_COMPUTE_32F_FAST_16F/16BF).
  absl::Status Gemm(cublasOperation_t trans_a, cublasOperation_t trans_b, int64_t m, int64_t n,
                    int64_t k, const float* alpha, const float* a, int64_t lda, const float* b,
                    int64_t ldb, const float* beta, float* c, int64_t ldc) {
    if (!compute_.has_value()) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, library_.Sgemm_64(cublas_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                                     beta, c, ldc));
      return absl::OkStatus();
    }
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, library_.GemmEx_64(cublas_, trans_a, trans_b, m, n, k, alpha, a, CUDA_R_32F, lda,
                                    b, CUDA_R_32F, ldb, beta, c, CUDA_R_32F, ldc, *compute_,
                                    CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }
  // Gemm over `batch` matrices `stride_*` elements apart.
  absl::Status GemmStridedBatched(cublasOperation_t trans_a, cublasOperation_t trans_b, int64_t m,
                                  int64_t n, int64_t k, const float* alpha, const float* a,
                                  int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                                  int64_t stride_b, const float* beta, float* c, int64_t ldc,
                                  int64_t stride_c, int64_t batch) {
    if (!compute_.has_value()) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, library_.SgemmStridedBatched_64(cublas_, trans_a, trans_b, m, n, k, alpha, a,
                                                   lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                                                   stride_c, batch));
      return absl::OkStatus();
    }
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_, library_.GemmStridedBatchedEx_64(cublas_, trans_a, trans_b, m, n, k, alpha, a,
                                                  CUDA_R_32F, lda, stride_a, b, CUDA_R_32F, ldb,
                                                  stride_b, beta, c, CUDA_R_32F, ldc, stride_c,
                                                  batch, *compute_, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }

  absl::Status Activate(float* y, int64_t elements) {
    if (activation_.op == CudaUnaryOp::kIdentity) return absl::OkStatus();
    LaunchUnary(y, y, elements, activation_, stream_);
    return LastLaunchStatus(device_, "LaunchUnary");
  }

 private:
  std::string device_;
  cublasHandle_t cublas_;
  const CublasLibrary& library_;
  cudaStream_t stream_;
  // The compute type of a product rounded to float16 or bfloat16; none
  // (Sgemm, in math_) otherwise.
  static std::optional<cublasComputeType_t> ReducedCompute(ComputePrecision math) {
    if (math == ComputePrecision::kFloat16) return CUBLAS_COMPUTE_32F_FAST_16F;
    if (math == ComputePrecision::kBFloat16) return CUBLAS_COMPUTE_32F_FAST_16BF;
    return std::nullopt;
  }

  cublasMath_t math_;
  std::optional<cublasComputeType_t> compute_;
  CudaUnary activation_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CUBLAS_RUNNER_H_
