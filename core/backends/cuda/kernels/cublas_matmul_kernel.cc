#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cublas_runner.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/fused_activation.h"
#include "core/ops/matmul_attributes.h"

namespace replicad {
namespace {

// cuBLAS is column-major and our tensors are row-major. A row-major [R, C]
// matrix is, byte for byte, the column-major [C, R] matrix of its transpose,
// so both kernels compute Y^T = B'^T A'^T: cuBLAS's first operand is B, its
// second A, and its m and n are our N and M.

// Y = alpha * A'B' + beta * C: C is first broadcast into Y, and the product
// accumulates onto it with beta.
class CublasGemmKernel : public Kernel {
 public:
  CublasGemmKernel(const CudaKernelContext& context, ComputePrecision math,
                   const GemmAttributes& gemm, bool use_c, const BroadcastIndex& c_index,
                   CudaUnary activation)
      : cublas_(context, math, activation),
        gemm_(gemm),
        use_c_(use_c),
        beta_(use_c ? gemm.beta : 0.0f),
        c_index_(c_index) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* a = static_cast<const float*>(inputs[0]);
    const float* b = static_cast<const float*>(inputs[1]);
    float* y = static_cast<float*>(outputs[0]);
    const int64_t elements = gemm_.m * gemm_.n;
    if (use_c_) {
      LaunchBroadcastCopy(static_cast<const float*>(inputs[2]), y, elements, c_index_,
                          cublas_.stream());
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(cublas_.device(), "LaunchBroadcastCopy"));
    }
    if (gemm_.k == 0) {
      if (!use_c_) {
        REPLICAD_RETURN_IF_ERROR(cublas_.Zero(y, elements));
      } else if (beta_ != 1.0f) {
        REPLICAD_RETURN_IF_ERROR(cublas_.PrepareHandle());
        REPLICAD_CUDA_RETURN_IF_ERROR(
            cublas_.device(), cublas_.library().Sscal_64(cublas_.cublas(), elements, &beta_, y, 1));
      }
      return cublas_.Activate(y, elements);
    }
    REPLICAD_RETURN_IF_ERROR(cublas_.PrepareHandle());
    // B'^T as column-major [N, K]: B [K, N] as it lies, or B [N, K] transposed.
    // A'^T as column-major [K, M]: A [M, K] as it lies, or A [K, M] transposed.
    REPLICAD_RETURN_IF_ERROR(cublas_.Gemm(
        gemm_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, gemm_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        gemm_.n, gemm_.m, gemm_.k, &gemm_.alpha, b, gemm_.trans_b ? gemm_.k : gemm_.n, a,
        gemm_.trans_a ? gemm_.m : gemm_.k, &beta_, y, gemm_.n));
    return cublas_.Activate(y, elements);
  }

 private:
  CublasRunner cublas_;
  GemmAttributes gemm_;
  bool use_c_;
  float beta_;
  BroadcastIndex c_index_;
};

// One cuBLAS call of a batched MatMul: where its first A, B and Y matrices
// start, in elements.
struct GemmCall {
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  int64_t y_offset = 0;
};

// A MatMul as `calls` strided-batched products of `batch` [rows, K] x [K, N]
// matrices each, A and B advancing by stride_a and stride_b (0: the same
// matrix for the whole batch) and Y by rows * N.
struct MatMulPlan {
  int64_t rows = 0;
  int64_t k = 0;
  int64_t n = 0;
  int64_t batch = 1;
  int64_t stride_a = 0;
  int64_t stride_b = 0;
  std::vector<GemmCall> calls;
};

// The output's batch dims split into outer dims, one call each, and inner
// dims, one strided batch: the inner dims are the longest suffix along which
// each operand either matches the output (a constant stride) or is all 1s
// (stride 0). Numpy broadcasting of both operands at once (A [2, 1], B
// [1, 3]) needs outer dims; everything else is a single call.
MatMulPlan PlanMatMul(const MatMulLayout& layout) {
  const Shape& out = layout.padded_output;
  const Shape& a = layout.a;
  const Shape& b = layout.b;
  const size_t batch_rank = out.size() - 2;
  const int64_t m = out[batch_rank];
  MatMulPlan plan;
  plan.k = a.back();
  plan.n = out.back();

  // Element strides of each operand along the batch dims, 0 where it broadcasts.
  std::vector<int64_t> a_strides(batch_rank), b_strides(batch_rank);
  int64_t a_step = m * plan.k;
  int64_t b_step = plan.k * plan.n;
  for (size_t d = batch_rank; d-- > 0;) {
    a_strides[d] = a[d] == 1 ? 0 : a_step;
    b_strides[d] = b[d] == 1 ? 0 : b_step;
    a_step *= a[d];
    b_step *= b[d];
  }
  const auto uniform = [&](const Shape& operand, size_t from) {
    bool same = true;
    bool ones = true;
    for (size_t d = from; d < batch_rank; ++d) {
      same = same && operand[d] == out[d];
      ones = ones && operand[d] == 1;
    }
    return same || ones;
  };
  size_t split = 0;
  while (split < batch_rank && !(uniform(a, split) && uniform(b, split))) ++split;

  int64_t inner = 1;
  int64_t a_inner = 1;
  int64_t b_inner = 1;
  for (size_t d = split; d < batch_rank; ++d) {
    inner *= out[d];
    a_inner *= a[d];
    b_inner *= b[d];
  }
  plan.rows = m;
  plan.batch = inner;
  plan.stride_a = a_inner == 1 ? 0 : m * plan.k;
  plan.stride_b = b_inner == 1 ? 0 : plan.k * plan.n;
  if (inner > 1 && plan.stride_b == 0 && plan.stride_a != 0) {
    // One B for a contiguous stack of A matrices: a single product with
    // inner * M rows, which cuBLAS runs better than a batch.
    plan.rows = inner * m;
    plan.batch = 1;
    plan.stride_a = 0;
  }

  int64_t outer = 1;
  for (size_t d = 0; d < split; ++d) outer *= out[d];
  plan.calls.reserve(outer);
  for (int64_t o = 0; o < outer; ++o) {
    GemmCall call;
    call.y_offset = o * inner * m * plan.n;
    int64_t rest = o;
    for (size_t d = split; d-- > 0;) {
      const int64_t index = rest % out[d];
      rest /= out[d];
      call.a_offset += index * a_strides[d];
      call.b_offset += index * b_strides[d];
    }
    plan.calls.push_back(call);
  }
  return plan;
}

// A fused bias is first broadcast into Y, every row, and the products
// accumulate onto it (beta 1), as Gemm's C.
class CublasMatMulKernel : public Kernel {
 public:
  CublasMatMulKernel(const CudaKernelContext& context, ComputePrecision math, MatMulPlan plan,
                     int64_t output_elements, CudaUnary activation, bool has_bias)
      : cublas_(context, math, activation),
        plan_(std::move(plan)),
        output_elements_(output_elements),
        has_bias_(has_bias) {
    bias_index_.out_dims[kMaxRank - 2] = plan_.n == 0 ? 0 : output_elements / plan_.n;
    bias_index_.out_dims[kMaxRank - 1] = plan_.n;
    bias_index_.a_strides[kMaxRank - 1] = 1;
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* a = static_cast<const float*>(inputs[0]);
    const float* b = static_cast<const float*>(inputs[1]);
    float* y = static_cast<float*>(outputs[0]);
    if (has_bias_) {
      LaunchBroadcastCopy(static_cast<const float*>(inputs[2]), y, output_elements_, bias_index_,
                          cublas_.stream());
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(cublas_.device(), "LaunchBroadcastCopy"));
    }
    if (plan_.k == 0) {
      if (!has_bias_) REPLICAD_RETURN_IF_ERROR(cublas_.Zero(y, output_elements_));
      return cublas_.Activate(y, output_elements_);
    }
    REPLICAD_RETURN_IF_ERROR(cublas_.PrepareHandle());
    const float one = 1.0f;
    const float beta = has_bias_ ? 1.0f : 0.0f;  // Onto the broadcast bias, or over Y.
    const int64_t rows = plan_.rows;
    const int64_t k = plan_.k;
    const int64_t n = plan_.n;
    for (const GemmCall& call : plan_.calls) {
      if (plan_.batch == 1) {
        REPLICAD_RETURN_IF_ERROR(cublas_.Gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, rows, k, &one,
                                              b + call.b_offset, n, a + call.a_offset, k, &beta,
                                              y + call.y_offset, n));
      } else {
        REPLICAD_RETURN_IF_ERROR(cublas_.GemmStridedBatched(
            CUBLAS_OP_N, CUBLAS_OP_N, n, rows, k, &one, b + call.b_offset, n, plan_.stride_b,
            a + call.a_offset, k, plan_.stride_a, &beta, y + call.y_offset, n, rows * n,
            plan_.batch));
      }
    }
    return cublas_.Activate(y, output_elements_);
  }

 private:
  CublasRunner cublas_;
  MatMulPlan plan_;
  int64_t output_elements_;
  bool has_bias_;
  BroadcastIndex bias_index_;
};

absl::StatusOr<CudaUnary> ReadActivation(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::optional<FusedActivation> fused,
                            ReadFusedActivation(*spec.attributes));
  return FusedUnary(fused);
}

}  // namespace

KernelOrStatus MakeCudaGemmKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GemmAttributes gemm, ParseGemmAttributes(spec));
  REPLICAD_ASSIGN_OR_RETURN(CudaUnary activation, ReadActivation(spec));
  // ONNX ignores C when beta is 0 (it may then hold anything, NaN included).
  const bool use_c = gemm.has_c && gemm.beta != 0.0f;
  BroadcastIndex c_index;
  if (use_c) {
    // C [rows, cols] broadcast to [M, N], as the last two of kMaxRank dims.
    const Shape c = PadToRank(spec.inputs[2]->shape, 2);
    for (int i = 0; i < kMaxRank; ++i) c_index.out_dims[i] = 1;
    c_index.out_dims[kMaxRank - 2] = gemm.m;
    c_index.out_dims[kMaxRank - 1] = gemm.n;
    c_index.a_strides[kMaxRank - 2] = c[0] == 1 ? 0 : c[1];
    c_index.a_strides[kMaxRank - 1] = c[1] == 1 ? 0 : 1;
  }
  return std::make_unique<CublasGemmKernel>(context, ProductMathOf(spec, context), gemm, use_c,
                                            c_index, activation);
}

KernelOrStatus MakeCudaMatMulKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(MatMulLayout layout, ParseMatMulLayout(spec));
  REPLICAD_ASSIGN_OR_RETURN(CudaUnary activation, ReadActivation(spec));
  return std::make_unique<CublasMatMulKernel>(
      context, ProductMathOf(spec, context), PlanMatMul(layout), NumElements(spec.outputs[0].shape),
      activation, layout.has_bias);
}

}  // namespace replicad
