#ifndef REPLICAD_CORE_MODEL_ATTENTION_FUSION_H_
#define REPLICAD_CORE_MODEL_ATTENTION_FUSION_H_

#include "core/model/graph.h"

namespace replicad {

// Scaled dot-product attention as exporters write it,
//   S = MatMul(Q, Kt) -> steps -> Softmax(last axis) -> MatMul(., V),
// becomes one replicad.Attention node (core/ops/attention_attributes.h),
// which computes a block of query rows at a time without writing the
// [..., M, N] scores and probabilities out. The steps, in any order and
// number up to four: Mul or Div by a scale (a constant or a value computed
// from shapes, as GPT-2 code writes 1 / sqrt(head_dim)), Add of an additive
// mask or a position bias, and Where(mask, fill, S) or Where(mask, S, fill)
// (masked_fill of a boolean or causal mask). Each intermediate value must
// have the next node as its only reader and not be a graph output, and all
// nodes must run under the same If guards. A softmax read by anything else,
// or scores that something else reads (attention weights returned to the
// caller), stay unfused. The fused op broadcasts as the nodes did, except
// that an operand may not enlarge S's last two dims and Q, Kt and V must be
// matrices (checked in every plan: a graph that multiplies vectors or
// widens the scores with a mask fails its plan with InvalidArgument).
void FuseAttention(Graph* graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_ATTENTION_FUSION_H_
