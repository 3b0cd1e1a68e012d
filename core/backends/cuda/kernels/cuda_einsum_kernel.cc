// Einsum on CUDA slots (core/ops/einsum_attributes.h). A float32 batched
// matrix product (EinsumAsBatchedProduct: maxvit_t's attention) is one
// strided-batched cuBLAS product on the inputs in place, as the CPU runs it on
// oneDNN's matmul; any other equation, and int64, is a loop (einsum.cu) that
// computes the CPU loop kernel's answer bit for bit.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cublas_runner.h"
#include "core/backends/cuda/kernels/einsum_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/einsum_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// How cuBLAS reads a matrix M [m, n] whose element (p, q) lies at
// p x p_stride + q x q_stride: as op(X) of a column-major X with leading
// dim ld. A dim of size 1 takes any stride.
struct CublasOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1;
};
std::optional<CublasOperand> AsCublasOperand(int64_t m, int64_t n, int64_t p_stride,
                                             int64_t q_stride) {
  // X = M, column-major: (p, q) at p + q x ld.
  if (p_stride == 1 || m == 1) {
    const int64_t ld = n == 1 ? std::max<int64_t>(m, 1) : q_stride;
    if (ld >= std::max<int64_t>(m, 1)) return CublasOperand{CUBLAS_OP_N, ld};
  }
  // X = M^T [n, m], column-major: (p, q) at q + p x ld.
  if (q_stride == 1 || n == 1) {
    const int64_t ld = m == 1 ? std::max<int64_t>(n, 1) : p_stride;
    if (ld >= std::max<int64_t>(n, 1)) return CublasOperand{CUBLAS_OP_T, ld};
  }
  return std::nullopt;
}

// Y [batch, rows, columns] row-major is, to cuBLAS, the column-major
// Y^T [columns, rows] = B^T [columns, depth] x A^T [depth, rows] per batch.
class EinsumProductKernel : public Kernel {
 public:
  EinsumProductKernel(const CudaKernelContext& context, ComputePrecision math,
                      const EinsumBatchedProduct& product, CublasOperand b, CublasOperand a)
      : cublas_(context, math, CudaUnary{}), product_(product), b_(b), a_(a) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* a = static_cast<const float*>(inputs[0]);
    const float* b = static_cast<const float*>(inputs[1]);
    float* y = static_cast<float*>(outputs[0]);
    const EinsumBatchedProduct& p = product_;
    if (p.depth == 0) return cublas_.Zero(y, p.batch * p.rows * p.columns);
    REPLICAD_RETURN_IF_ERROR(cublas_.PrepareHandle());
    const float one = 1.0f, zero = 0.0f;
    if (p.batch == 1) {
      return cublas_.Gemm(b_.op, a_.op, p.columns, p.rows, p.depth, &one, b, b_.ld, a, a_.ld, &zero,
                          y, p.columns);
    }
    return cublas_.GemmStridedBatched(b_.op, a_.op, p.columns, p.rows, p.depth, &one, b, b_.ld,
                                      p.b_batch_stride, a, a_.ld, p.a_batch_stride, &zero, y,
                                      p.columns, p.rows * p.columns, p.batch);
  }

 private:
  CublasRunner cublas_;
  EinsumBatchedProduct product_;
  CublasOperand b_;
  CublasOperand a_;
};

template <typename T>
class EinsumLoopKernel : public Kernel {
 public:
  EinsumLoopKernel(const CudaKernelContext& context, const DeviceEinsumLoop& loop, int64_t n_out)
      : context_(context), loop_(loop), n_out_(n_out) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    EinsumOperands operands;
    for (int t = 0; t < loop_.terms; ++t) operands.data[t] = inputs[t];
    LaunchEinsumLoop(loop_, operands, static_cast<T*>(outputs[0]), n_out_, context_.stream);
    return LastLaunchStatus(context_.device, "EinsumLoopKernel");
  }

 private:
  const CudaKernelContext& context_;
  DeviceEinsumLoop loop_;
  int64_t n_out_;
};

// The cuBLAS product of `spec`, or nullptr when its equation (or dtype) is
// no batched matrix product cuBLAS can read in place.
std::unique_ptr<Kernel> MakeProductKernel(const KernelSpec& spec, const EinsumLayout& layout,
                                          CudaKernelContext& context) {
  if (spec.inputs.size() != 2 || spec.inputs[0]->dtype != DType::kFloat32) return nullptr;
  const std::optional<EinsumBatchedProduct> product =
      EinsumAsBatchedProduct(layout, spec.inputs[0]->shape, spec.inputs[1]->shape);
  if (!product.has_value()) return nullptr;
  const std::optional<CublasOperand> b = AsCublasOperand(
      product->columns, product->depth, product->b_column_stride, product->b_depth_stride);
  const std::optional<CublasOperand> a = AsCublasOperand(
      product->depth, product->rows, product->a_depth_stride, product->a_row_stride);
  if (!b.has_value() || !a.has_value()) return nullptr;
  return std::make_unique<EinsumProductKernel>(context, ProductMathOf(spec, context), *product, *b,
                                               *a);
}

}  // namespace

KernelOrStatus MakeCudaEinsumKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(EinsumLayout layout, ParseEinsum(spec));
  if (std::unique_ptr<Kernel> product = MakeProductKernel(spec, layout, context)) return product;
  const int terms = static_cast<int>(layout.terms.size());
  const int labels = static_cast<int>(layout.labels.size());
  if (terms > kMaxEinsumTerms || labels > kMaxEinsumLabels) {
    return NodeUnimplemented(
        spec, absl::StrCat("the CUDA backend computes an Einsum of at most ", kMaxEinsumTerms,
                           " inputs and ", kMaxEinsumLabels, " labels; received ", terms,
                           " inputs and ", labels, " labels"));
  }
  std::vector<Shape> shapes;
  for (const std::optional<TensorType>& input : spec.inputs) shapes.push_back(input->shape);
  const std::vector<std::vector<int64_t>> strides = EinsumLabelStrides(layout, shapes);
  DeviceEinsumLoop loop;
  loop.terms = terms;
  loop.labels = labels;
  loop.output_labels = static_cast<int>(layout.output.size());
  for (int l = 0; l < labels; ++l) {
    loop.sizes[l] = layout.sizes[l];
    if (l >= loop.output_labels) loop.inner *= layout.sizes[l];
    for (int t = 0; t < terms; ++t) loop.strides[t][l] = strides[t][l];
  }
  const int64_t n_out = NumElements(spec.outputs[0].shape);
  if (spec.outputs[0].dtype == DType::kInt64) {
    return std::make_unique<EinsumLoopKernel<int64_t>>(context, loop, n_out);
  }
  return std::make_unique<EinsumLoopKernel<float>>(context, loop, n_out);
}

}  // namespace replicad
