#ifndef REPLICAD_CORE_TRAIN_TRANSFORMER_GRADIENTS_H_
#define REPLICAD_CORE_TRAIN_TRANSFORMER_GRADIENTS_H_

#include "absl/status/status.h"
#include "core/train/gradient_rules.h"

namespace replicad {

// The gradient rules of the ops a transformer's forward pass adds to a
// CNN's (gradient_rules.cc lists them with the others). Each is built of
// forward ops and replicad.* training ops:
//   Gather (axis 0: an embedding)  dTable = ScatterND(zeros, indices, dY, add)
//   LayerNormalization  dX = inv_std (g - mean(g) - x^ mean(g x^)), g = dY scale;
//                       dScale = sum(dY x^), dB = sum(dY) over the leading dims
//   Erf                 dX = dY 2 / sqrt(pi) exp(-x^2)  (exact GELU is built of it)
//   Where               dX = Where(c, dY, 0), dY' = Where(c, 0, dY), each summed to shape
//   ReduceSum           dX = dY (with the reduced dims back as 1s) expanded to X
//   ReduceMean          the same divided by the elements each output averaged
//   Pow                 dA = dY B A^(B-1), dB = dY Y ln(A) (a LayerNorm written out)
//   Slice               replicad.SliceGrad
//   Split               dX = Concat of the outputs' gradients (0 for unused outputs)
//   Expand              dX = dY summed to X's shape
//   Cast                float32 to float32 only: the identity
absl::Status GatherGradient(GradientBuilder& b);
absl::Status LayerNormalizationGradient(GradientBuilder& b);
absl::Status ErfGradient(GradientBuilder& b);
absl::Status WhereGradient(GradientBuilder& b);
absl::Status SumOrMeanGradient(GradientBuilder& b);  // ReduceSum and ReduceMean.
absl::Status PowGradient(GradientBuilder& b);
absl::Status SliceGradient(GradientBuilder& b);
absl::Status SplitGradient(GradientBuilder& b);
absl::Status ExpandGradient(GradientBuilder& b);
absl::Status CastGradient(GradientBuilder& b);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRANSFORMER_GRADIENTS_H_
