#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/fused_activation.h"
#include "core/ops/matmul_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {

absl::StatusOr<GemmAttributes> ParseGemmAttributes(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType a, RequiredInput(spec, 0, "A"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType b, RequiredInput(spec, 1, "B"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "A", a, {DType::kFloat32}, {DType::kInt64}));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "B", b, {DType::kFloat32}, {DType::kInt64}));
  GemmAttributes gemm;
  REPLICAD_ASSIGN_OR_RETURN(int64_t trans_a, IntAttribute(spec, "transA", 0));
  REPLICAD_ASSIGN_OR_RETURN(int64_t trans_b, IntAttribute(spec, "transB", 0));
  REPLICAD_ASSIGN_OR_RETURN(gemm.alpha, FloatAttribute(spec, "alpha", 1.0f));
  REPLICAD_ASSIGN_OR_RETURN(gemm.beta, FloatAttribute(spec, "beta", 1.0f));
  gemm.trans_a = trans_a != 0;
  gemm.trans_b = trans_b != 0;
  if (a.shape.size() != 2) {
    return NodeError(spec,
                     absl::StrCat("input 0 'A' must be 2-D, received ", TensorTypeToString(a)));
  }
  if (b.shape.size() != 2) {
    return NodeError(spec,
                     absl::StrCat("input 1 'B' must be 2-D, received ", TensorTypeToString(b)));
  }
  gemm.m = gemm.trans_a ? a.shape[1] : a.shape[0];
  gemm.k = gemm.trans_a ? a.shape[0] : a.shape[1];
  const int64_t b_k = gemm.trans_b ? b.shape[1] : b.shape[0];
  gemm.n = gemm.trans_b ? b.shape[0] : b.shape[1];
  if (b_k != gemm.k) {
    return NodeError(
        spec, absl::StrCat("input 1 'B' must have K = ", gemm.k, " in dim ", gemm.trans_b ? 1 : 0,
                           " (transA=", trans_a, ", transB=", trans_b, ", A ",
                           TensorTypeToString(a), "), received ", TensorTypeToString(b)));
  }
  if (HasInput(spec, 2)) {
    const TensorType& c = *spec.inputs[2];
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 2, "C", c, {DType::kFloat32}));
    if (!BroadcastsTo(c.shape, {gemm.m, gemm.n})) {
      return NodeError(spec, absl::StrCat("input 2 'C' must broadcast to [", gemm.m, ",", gemm.n,
                                          "], received ", TensorTypeToString(c)));
    }
    gemm.has_c = true;
  }
  return gemm;
}

absl::Status InferGemm(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(GemmAttributes gemm, ParseGemmAttributes(*spec));
  spec->outputs = {TensorType{DType::kFloat32, {gemm.m, gemm.n}}};
  return absl::OkStatus();
}

absl::StatusOr<MatMulLayout> MatMulShapes(const KernelSpec& spec, const TensorType& a,
                                          const TensorType& b, int b_index) {
  if (a.shape.empty() || b.shape.empty()) {
    return NodeError(spec, absl::StrCat("inputs must have rank >= 1, received A ",
                                        TensorTypeToString(a), " and B ", TensorTypeToString(b)));
  }
  Shape a2 = a.shape.size() == 1 ? Shape{1, a.shape[0]} : a.shape;
  Shape b2 = b.shape.size() == 1 ? Shape{b.shape[0], 1} : b.shape;
  const int64_t k = a2.back();
  if (b2[b2.size() - 2] != k) {
    const size_t rows_dim = b.shape.size() == 1 ? 0 : b.shape.size() - 2;
    return NodeError(spec, absl::StrCat("input ", b_index, " 'B' must have ", k,
                                        " (A's last dim) in dim ", rows_dim, ", received A ",
                                        TensorTypeToString(a), " and B ", TensorTypeToString(b)));
  }
  const size_t rank = std::max(a2.size(), b2.size());
  MatMulLayout layout;
  layout.a = PadToRank(a2, rank);
  layout.b = PadToRank(b2, rank);
  const std::optional<Shape> batch = BroadcastShapes(Shape(layout.a.begin(), layout.a.end() - 2),
                                                     Shape(layout.b.begin(), layout.b.end() - 2));
  if (!batch.has_value()) {
    return NodeError(spec, absl::StrCat("batch dims of A ", TensorTypeToString(a), " and B ",
                                        TensorTypeToString(b), " do not broadcast"));
  }
  const int64_t m = a2[a2.size() - 2];
  const int64_t n = b2.back();
  layout.padded_output = *batch;
  layout.padded_output.push_back(m);
  layout.padded_output.push_back(n);
  // The batch dims of the output come from the operands' original ranks, so
  // padding both to `rank` never adds dims the ONNX output lacks.
  layout.output = *batch;
  if (a.shape.size() > 1) layout.output.push_back(m);
  if (b.shape.size() > 1) layout.output.push_back(n);
  return layout;
}

absl::StatusOr<MatMulLayout> ParseMatMulLayout(const KernelSpec& spec) {
  const bool fused_bias = HasFusedBias(*spec.attributes);
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, fused_bias ? 3 : 2, fused_bias ? 3 : 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType a, RequiredInput(spec, 0, "A"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType b, RequiredInput(spec, 1, "B"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "A", a, {DType::kFloat32}, {DType::kInt64}));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 1, "B", b, {DType::kFloat32}, {DType::kInt64}));
  REPLICAD_ASSIGN_OR_RETURN(MatMulLayout layout, MatMulShapes(spec, a, b, 1));
  if (fused_bias) {
    const int64_t n = layout.padded_output.back();
    REPLICAD_ASSIGN_OR_RETURN(TensorType bias, RequiredInput(spec, 2, "bias"));
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 2, "bias", bias, {DType::kFloat32}));
    if (NumElements(bias.shape) != n || (!bias.shape.empty() && bias.shape.back() != n)) {
      return NodeError(spec, absl::StrCat("input 2 'bias' (fused) must hold one value per output "
                                          "column, [",
                                          n, "], received ", TensorTypeToString(bias)));
    }
    layout.has_bias = true;
  }
  return layout;
}

absl::Status InferMatMul(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(MatMulLayout layout, ParseMatMulLayout(*spec));
  spec->outputs = {TensorType{DType::kFloat32, layout.output}};
  return absl::OkStatus();
}

}  // namespace replicad
