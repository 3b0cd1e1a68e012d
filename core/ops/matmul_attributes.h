#ifndef REPLICAD_CORE_OPS_MATMUL_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_MATMUL_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// Gemm: Y [M, N] = alpha * A' B' + beta * C, where A' is A [M, K] (or A^T of
// A [K, M] with transA) and B' is B [K, N] (or B^T of B [N, K] with transB).
// C is optional and broadcasts unidirectionally to [M, N].
struct GemmAttributes {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 1.0f;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  bool has_c = false;
};

// Validates a Gemm node; InvalidArgument naming the node, the input and the
// expected and received shapes; Unimplemented for int64 (ONNX allows it).
absl::StatusOr<GemmAttributes> ParseGemmAttributes(const KernelSpec& spec);

// MatMul with numpy semantics: a 1-D A becomes [1, K] and a 1-D B [K, 1]
// (the added dim is dropped from the output), then batch dims broadcast.
// All of a, b and padded_output have the same rank >= 2, padded with leading
// 1s: a = [batch..., M, K], b = [batch..., K, N], padded_output =
// [broadcast batch..., M, N]. `output` is the ONNX output shape, with the same
// elements as padded_output.
struct MatMulLayout {
  Shape a;
  Shape b;
  Shape padded_output;
  Shape output;
  bool has_bias = false;  // A fused bias of N values as input 2 (fused_activation.h).
};

// The shapes of a matrix product of A and B under MatMul's rules, whatever
// their element types (MatMul, MatMulInteger, QLinearMatMul): InvalidArgument
// for rank-0 operands, a K mismatch (naming B as input `b_index`) and batch
// dims that do not broadcast. has_bias stays false.
absl::StatusOr<MatMulLayout> MatMulShapes(const KernelSpec& spec, const TensorType& a,
                                          const TensorType& b, int b_index);

// Validates a MatMul node: InvalidArgument for rank-0 operands, K mismatches
// and batch dims that do not broadcast or a fused bias of other than N
// values; Unimplemented for int64.
absl::StatusOr<MatMulLayout> ParseMatMulLayout(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_MATMUL_ATTRIBUTES_H_
