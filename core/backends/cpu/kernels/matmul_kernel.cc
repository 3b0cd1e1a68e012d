#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/fused_post_ops.h"
#include "core/backends/cpu/kernels/gemv.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/product_precision.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/fused_activation.h"
#include "core/ops/matmul_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using dnnl::memory;

// The matmul for B read as `b`. Where B is a plan-time constant (a
// classifier's weights), oneDNN picks B's layout first and BindB reorders the
// constant into it once: read in ONNX's layout, oneDNN 2.6's brgemm matmul
// repacks the whole of B on every call (0.34 ms of mnasnet0_75's 3.1 ms at
// batch 1, for its 1280 x 1000 classifier).
// A bf16 product takes B in oneDNN's layout or throws.
dnnl::matmul::primitive_desc MatMulPrimitive(
    absl::FunctionRef<dnnl::matmul::desc(const memory::desc& weights)> desc_for,
    const memory::desc& b, bool constant_b, const dnnl::primitive_attr& attr,
    const dnnl::engine& engine, memory::data_type product = memory::data_type::f32) {
  if (constant_b || product != memory::data_type::f32) {
    try {
      const memory::desc any(b.dims(), product, memory::format_tag::any);
      return dnnl::matmul::primitive_desc(desc_for(any), attr, engine);
    } catch (const dnnl::error&) {
      // No implementation chooses B's layout for this form: read it as given.
      if (product != memory::data_type::f32) throw;
    }
  }
  return dnnl::matmul::primitive_desc(desc_for(b), attr, engine);
}

// B is input 1: the constant in the primitive's layout, else as given, or
// (a bf16 product of a B computed at run time: the weights a training step
// feeds) converted on every run.
ConvertedOperand BindB(BoundPrimitive& primitive, const dnnl::matmul::primitive_desc& pd,
                       const memory::desc& b, const Tensor* constant_b, CpuKernelContext& context) {
  if (constant_b != nullptr && pd.weights_desc() != b) {
    primitive.BindFixed(DNNL_ARG_WEIGHTS,
                        PreparedWeights(context, *constant_b, b, pd.weights_desc()));
    return {};
  }
  return BindOperand(context, primitive, DNNL_ARG_WEIGHTS, b, pd.weights_desc(), 1);
}

const Tensor* ConstantB(const KernelSpec& spec) {
  return spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
}

// Y = alpha * A'B' + beta * C. oneDNN's sum post-op adds beta times what dst
// held before, so Run first broadcasts C into Y (M*N stores, cheap next to
// the M*N*K product) and the matmul accumulates onto it; alpha is the
// primitive's output scale.
class GemmKernel : public Kernel {
 public:
  GemmKernel(CpuKernelContext& context, std::string node, BoundPrimitive primitive, int64_t m,
             int64_t n, int64_t c_rows, int64_t c_cols, bool has_c)
      : context_(context),
        node_(std::move(node)),
        primitive_(std::move(primitive)),
        m_(m),
        n_(n),
        c_rows_(c_rows),
        c_cols_(c_cols),
        has_c_(has_c) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (has_c_) {
      const float* c = static_cast<const float*>(inputs[2]);
      float* y = static_cast<float*>(outputs[0]);
      for (int64_t i = 0; i < m_; ++i) {
        const float* c_row = c + (c_rows_ == 1 ? 0 : i * c_cols_);
        float* y_row = y + i * n_;
        if (c_cols_ == 1) {
          std::fill(y_row, y_row + n_, c_row[0]);
        } else {
          std::copy(c_row, c_row + n_, y_row);
        }
      }
    }
    REPLICAD_RETURN_IF_ERROR(primitive_.Execute(inputs, outputs, node_));
    return WaitStream(context_, node_);
  }

 private:
  CpuKernelContext& context_;
  std::string node_;
  BoundPrimitive primitive_;
  int64_t m_, n_, c_rows_, c_cols_;
  bool has_c_;
};

// A Gemm of one row against constant weights stored [N, K] (transB = 1),
// with no fused activation but Relu: Y = alpha * W A + beta * C by GemvRows,
// which reads W as the model holds it (see gemv.h).
class GemvKernel : public Kernel {
 public:
  GemvKernel(Tensor weights, int64_t n, int64_t k, float alpha, float beta, int64_t c_cols,
             bool has_c, bool relu)
      : weights_(std::move(weights)),
        n_(n),
        k_(k),
        alpha_(alpha),
        beta_(beta),
        c_cols_(c_cols),
        has_c_(has_c),
        relu_(relu) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    float* y = static_cast<float*>(outputs[0]);
    GemvRows(weights_.data<float>(), static_cast<const float*>(inputs[0]), y, n_, k_);
    const float* c = has_c_ ? static_cast<const float*>(inputs[2]) : nullptr;
    for (int64_t j = 0; j < n_; ++j) {
      float v = alpha_ * y[j];
      if (c != nullptr) v += beta_ * c[c_cols_ == 1 ? 0 : j];
      // std::max(v, 0) is v when v is NaN (NaN < 0 is false): NaN stays.
      y[j] = relu_ ? std::max(v, 0.0f) : v;
    }
    return absl::OkStatus();
  }

 private:
  Tensor weights_;  // Shares the model's buffer: kept alive, never copied.
  int64_t n_, k_;
  float alpha_, beta_;
  int64_t c_cols_;
  bool has_c_, relu_;
};

// Where B has no batch of its own (a Linear layer's weights, [K, N]), A's
// batch dims and its rows are one row-major run: [batch..., M, K] is the
// same bytes as [batch x M, K], and Y likewise. oneDNN 2.6 runs a batched
// matmul as one small product per batch entry; convnext's last stage
// ([1, 7, 7, 768] x [768, 3072]) took 2.8 ms as 7 products of 7 rows
// against 1.2 ms for ONNX Runtime's one of 49.
void FoldBatchIntoRows(MatMulLayout* layout) {
  const size_t rank = layout->a.size();
  if (rank <= 2) return;
  for (size_t d = 0; d + 2 < rank; ++d) {
    if (layout->b[d] != 1) return;
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= layout->a[d];
  const int64_t k = layout->a[rank - 1];
  const int64_t n = layout->b[rank - 1];
  layout->a = {rows, k};
  layout->b = {k, n};
  layout->padded_output = {rows, n};
}

// Whether GemvKernel computes this Gemm: one row, constant [N, K] weights
// and no fused activation other than Relu.
absl::StatusOr<bool> GemvComputes(const KernelSpec& spec, const GemmAttributes& gemm, bool* relu) {
  if (gemm.m != 1 || !gemm.trans_b || ConstantB(spec) == nullptr) return false;
  REPLICAD_ASSIGN_OR_RETURN(std::optional<FusedActivation> activation,
                            ReadFusedActivation(*spec.attributes));
  *relu = activation.has_value() && activation->op_type == "Relu";
  return !activation.has_value() || *relu;
}

KernelOrStatus BuildGemmKernel(const KernelSpec& spec, CpuKernelContext& context,
                               memory::data_type product) {
  REPLICAD_ASSIGN_OR_RETURN(GemmAttributes gemm, ParseGemmAttributes(spec));
  const memory::data_type f32 = memory::data_type::f32;
  // A transposed operand is the same bytes read with swapped strides.
  const memory::desc a({gemm.m, gemm.k}, f32,
                       gemm.trans_a ? memory::dims{1, gemm.m} : memory::dims{gemm.k, 1});
  const memory::desc b({gemm.k, gemm.n}, f32,
                       gemm.trans_b ? memory::dims{1, gemm.k} : memory::dims{gemm.n, 1});
  const memory::desc y({gemm.m, gemm.n}, f32, memory::format_tag::ab);

  dnnl::primitive_attr attr = UserScratchpadAttr();
  if (gemm.alpha != 1.0f) attr.set_output_scales(0, {gemm.alpha});
  // ONNX ignores C when beta is 0 (it may then hold anything, NaN included).
  const bool use_c = gemm.has_c && gemm.beta != 0.0f;
  dnnl::post_ops ops;
  if (use_c) ops.append_sum(gemm.beta);
  ActivationStep activation;
  REPLICAD_RETURN_IF_ERROR(AppendFusedActivation(spec, &ops, &activation));
  attr.set_post_ops(ops);
  int64_t c_rows = 1;
  int64_t c_cols = 1;
  if (use_c) {
    const Shape c = PadToRank(spec.inputs[2]->shape, 2);
    c_rows = c[0];
    c_cols = c[1];
  }
  const Tensor* constant_b = ConstantB(spec);
  bool relu = false;
  REPLICAD_ASSIGN_OR_RETURN(const bool gemv, GemvComputes(spec, gemm, &relu));
  if (gemv) {
    return std::make_unique<GemvKernel>(*constant_b, gemm.n, gemm.k, gemm.alpha, gemm.beta, c_cols,
                                        use_c, relu);
  }
  // Read in bf16, A is a dense row-major copy, transposed or not.
  const memory::desc a_read =
      product == f32 ? a : memory::desc({gemm.m, gemm.k}, product, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd = MatMulPrimitive(
      [&](const memory::desc& weights) { return dnnl::matmul::desc(a_read, weights, y); }, b,
      constant_b != nullptr, attr, context.engine, product);
  BoundPrimitive primitive(context, pd, dnnl::matmul(pd));
  ConvertedOperand source = BindOperand(context, primitive, DNNL_ARG_SRC, a, a_read, 0);
  ConvertedOperand weights = BindB(primitive, pd, b, constant_b, context);
  primitive.BindOutput(DNNL_ARG_DST, y, 0);
  return WithActivationPass(
      WithConvertedOperand(NodeLabel(spec), std::move(source),
                           WithConvertedOperand(NodeLabel(spec), std::move(weights),
                                                std::make_unique<GemmKernel>(
                                                    context, NodeLabel(spec), std::move(primitive),
                                                    gemm.m, gemm.n, c_rows, c_cols, use_c))),
      activation, gemm.m * gemm.n);
}

KernelOrStatus BuildMatMulKernel(const KernelSpec& spec, CpuKernelContext& context,
                                 memory::data_type product) {
  REPLICAD_ASSIGN_OR_RETURN(MatMulLayout layout, ParseMatMulLayout(spec));
  FoldBatchIntoRows(&layout);
  const memory::data_type f32 = memory::data_type::f32;
  // oneDNN broadcasts batch dims of size 1 in either operand, which is numpy's
  // rule once both are padded to one rank.
  const memory::desc a = RowMajorDesc(layout.a, f32);
  const memory::desc b = RowMajorDesc(layout.b, f32);
  const memory::desc y = RowMajorDesc(layout.padded_output, f32);
  // A fused bias is one row, broadcast over every other dim of Y.
  Shape bias_dims(layout.padded_output.size(), 1);
  bias_dims.back() = layout.padded_output.back();
  const memory::desc bias = layout.has_bias ? RowMajorDesc(bias_dims, f32) : memory::desc();
  dnnl::primitive_attr attr = UserScratchpadAttr();
  dnnl::post_ops ops;
  ActivationStep activation;
  REPLICAD_RETURN_IF_ERROR(AppendFusedActivation(spec, &ops, &activation));
  attr.set_post_ops(ops);
  const Tensor* constant_b = ConstantB(spec);
  const memory::desc a_read = product == f32 ? a : RowMajorDesc(layout.a, product);
  const dnnl::matmul::primitive_desc pd = MatMulPrimitive(
      [&](const memory::desc& weights) { return dnnl::matmul::desc(a_read, weights, bias, y); }, b,
      constant_b != nullptr, attr, context.engine, product);
  BoundPrimitive primitive(context, pd, dnnl::matmul(pd));
  ConvertedOperand source = BindOperand(context, primitive, DNNL_ARG_SRC, a, a_read, 0);
  ConvertedOperand weights = BindB(primitive, pd, b, constant_b, context);
  if (layout.has_bias) primitive.BindInput(DNNL_ARG_BIAS, bias, 2);
  primitive.BindOutput(DNNL_ARG_DST, y, 0);
  return WithActivationPass(
      WithConvertedOperand(
          NodeLabel(spec), std::move(source),
          WithConvertedOperand(
              NodeLabel(spec), std::move(weights),
              std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive)))),
      activation, NumElements(spec.outputs[0].shape));
}

// A node marked bf16 (product_precision.h: a constant B when serving, the
// weights a training step feeds when training) computes so; one whose form
// oneDNN has no bf16 matmul for computes f32.
KernelOrStatus WithProductFallback(
    const KernelSpec& spec, CpuKernelContext& context,
    absl::FunctionRef<KernelOrStatus(const KernelSpec&, CpuKernelContext&, memory::data_type)>
        build) {
  const memory::data_type product = ProductDataType(spec);
  if (product != memory::data_type::f32) {
    try {
      return build(spec, context, product);
    } catch (const dnnl::error&) {
      // No bf16 implementation for this form.
    }
  }
  return build(spec, context, memory::data_type::f32);
}

}  // namespace

KernelOrStatus MakeGemmKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return WithProductFallback(spec, context, BuildGemmKernel);
}

KernelOrStatus MakeMatMulKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return WithProductFallback(spec, context, BuildMatMulKernel);
}

}  // namespace replicad
