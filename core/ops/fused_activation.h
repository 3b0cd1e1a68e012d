#ifndef REPLICAD_CORE_OPS_FUSED_ACTIVATION_H_
#define REPLICAD_CORE_OPS_FUSED_ACTIVATION_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/tensor/attributes.h"

namespace replicad {

// An element-wise activation that a Conv, Gemm or MatMul applies to its own output,
// set by the load-time graph optimizer instead of a separate node. The
// attribute names contain a dot, which ONNX attribute names never do.
inline constexpr char kFusedActivation[] = "replicad.activation";
inline constexpr char kFusedAlpha[] = "replicad.alpha";
inline constexpr char kFusedBeta[] = "replicad.beta";

struct FusedActivation {
  // Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, Tanh, HardSwish, Swish
  // (x * sigmoid(alpha * x); alpha 1 is SiLU) or Gelu (x / 2 * (1 +
  // erf(x / sqrt(2))), the exact form).
  std::string op_type;
  float alpha = 0;  // LeakyRelu's slope; Clip's lower bound; HardSigmoid's and Swish's alpha.
  float beta = 0;   // Clip's upper bound; HardSigmoid's beta.
};

// The node's fused activation, nullopt when there is none; InvalidArgument
// for an activation outside the list above.
absl::StatusOr<std::optional<FusedActivation>> ReadFusedActivation(const Attributes& attributes);

// A Conv that absorbed the Add after it (a residual connection): it takes
// the other addend as input 3, of exactly its output's type, and computes
// conv(X) + input 3 before any fused activation.
inline constexpr char kFusedSum[] = "replicad.sum";
bool HasFusedSum(const Attributes& attributes);

// A MatMul that absorbed the Add of a constant bias after it: it takes the
// bias, one value per output column ([N], leading 1s allowed), as input 2
// and adds it to every row before any fused activation.
inline constexpr char kFusedBias[] = "replicad.bias";
bool HasFusedBias(const Attributes& attributes);

// Sets the attributes that ReadFusedActivation reads.
void WriteFusedActivation(const FusedActivation& activation, Attributes* attributes);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_FUSED_ACTIVATION_H_
