#include "core/ops/fused_activation.h"

#include "absl/strings/str_cat.h"

namespace replicad {

absl::StatusOr<std::optional<FusedActivation>> ReadFusedActivation(const Attributes& attributes) {
  if (!attributes.Has(kFusedActivation)) return std::nullopt;
  FusedActivation activation;
  absl::StatusOr<std::string> op = attributes.GetString(kFusedActivation, "");
  absl::StatusOr<float> alpha = attributes.GetFloat(kFusedAlpha, 0);
  absl::StatusOr<float> beta = attributes.GetFloat(kFusedBeta, 0);
  if (!op.ok()) return op.status();
  if (!alpha.ok()) return alpha.status();
  if (!beta.ok()) return beta.status();
  for (const char* known : {"Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "Tanh",
                            "HardSwish", "Swish", "Gelu"}) {
    if (*op == known) return FusedActivation{*op, *alpha, *beta};
  }
  return absl::InvalidArgumentError(absl::StrCat("fused activation '", *op, "' is not supported"));
}

bool HasFusedSum(const Attributes& attributes) {
  absl::StatusOr<int64_t> sum = attributes.GetInt(kFusedSum, 0);
  return sum.ok() && *sum != 0;
}

bool HasFusedBias(const Attributes& attributes) {
  absl::StatusOr<int64_t> bias = attributes.GetInt(kFusedBias, 0);
  return bias.ok() && *bias != 0;
}

void WriteFusedActivation(const FusedActivation& activation, Attributes* attributes) {
  attributes->Set(kFusedActivation, activation.op_type);
  attributes->Set(kFusedAlpha, activation.alpha);
  attributes->Set(kFusedBeta, activation.beta);
}

}  // namespace replicad
