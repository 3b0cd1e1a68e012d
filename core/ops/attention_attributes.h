#ifndef REPLICAD_CORE_OPS_ATTENTION_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_ATTENTION_ATTRIBUTES_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/attributes.h"
#include "core/tensor/shape.h"

namespace replicad {

// The fused attention the load-time optimizer makes of
//   S = MatMul(Q, Kt) -> zero or more steps on S -> Softmax(S, last axis) -> MatMul(., V)
// (core/model/attention_fusion.h), so that a backend computes it a block of
// query rows at a time without writing the [..., M, N] scores out. Inputs:
// Q [batch..., M, K], Kt [batch..., K, N], V [batch..., N, D] (float32, rank
// >= 2), then the steps' operands. Batch dims broadcast as the unfused
// nodes broadcast them, operands' included (a mask may add a dim); output:
// [batch..., M, D] over all of them.
inline constexpr std::string_view kAttention = "replicad.Attention";

// What the graph did to S between the two MatMuls, in order. Each operand is
// an input of the node whose last two dims broadcast into S's [M, N] (a
// scalar, a row per query, a column per key, or [M, N]).
struct AttentionStep {
  enum class Kind : int64_t {
    kMul = 0,         // S * operand
    kDiv = 1,         // S / operand
    kAdd = 2,         // S + operand (an additive mask, a position bias)
    kFillWhere = 3,   // Where(condition, operand, S): a boolean mask's fill
    kFillUnless = 4,  // Where(condition, S, operand)
  };
  Kind kind = Kind::kMul;
  int operand = 0;     // Input index (>= 3) of a float32 tensor.
  int condition = -1;  // Input index of a bool tensor, for the fills only.

  bool operator==(const AttentionStep& other) const {
    return kind == other.kind && operand == other.operand && condition == other.condition;
  }
};

// The steps as the node's attribute holds them: (kind, operand, condition)
// triples of ints.
inline constexpr char kAttentionSteps[] = "replicad.attention_steps";
void WriteAttentionSteps(const std::vector<AttentionStep>& steps, Attributes* attributes);

// Transposes the node reads and writes through (the optimizer absorbs an
// exporter's Transpose of Q, Kt or V, and of the output, into the node): a
// perm on input i means the input holds the source of Transpose(perm), the
// matrix the node computes with; on the output, the node writes
// Transpose(Y, perm). Absent: as given. A perm must leave a matrix one unit
// stride: for an input, the source's last dim stays one of the last two;
// for the output, D stays last.
inline constexpr const char* kAttentionPerms[4] = {"replicad.q_perm", "replicad.kt_perm",
                                                   "replicad.v_perm", "replicad.output_perm"};

// A matrix per output batch entry, in the tensor as it lies: entry b's
// element (r, c) is at batch_offsets[b] + r * row_stride + c * col_stride
// (elements). One of the strides is 1 unless a dim is broadcast.
struct MatrixView {
  std::vector<int64_t> batch_offsets;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// A step's operand or condition: input `input` of the node (-1: none), as a
// [rows, cols] matrix per output batch entry, its strides 0 where a dim is
// broadcast.
struct AttentionOperand {
  int input = -1;
  MatrixView view;
};

struct AttentionLayout {
  int64_t batch = 1;  // Output batch entries (the product of the batch dims).
  int64_t m = 0, k = 0, n = 0, d = 0;
  MatrixView q, kt, v, output;
  std::vector<AttentionStep> steps;
  // Per step: its operand and, for the fills, its condition (else input -1).
  std::vector<AttentionOperand> operands, conditions;
  Shape output_shape;
};

// Validates the node: three float32 inputs of rank >= 2 whose inner dims
// chain (Q's K is Kt's, Kt's N is V's), batch dims that broadcast, steps
// naming inputs that exist, float32 operands and bool conditions whose last
// two dims fit [M, N]. InvalidArgument naming the node, the input, the
// expected and the received value.
absl::StatusOr<AttentionLayout> ParseAttentionLayout(const KernelSpec& spec);

absl::Status InferAttention(KernelSpec* spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_ATTENTION_ATTRIBUTES_H_
