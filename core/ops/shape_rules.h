#ifndef REPLICAD_CORE_OPS_SHAPE_RULES_H_
#define REPLICAD_CORE_OPS_SHAPE_RULES_H_

#include "absl/status/status.h"
#include "core/device/kernel.h"

namespace replicad {

// The shape rule of each operator, as OpDefinition::infer expects: validates
// spec and sets spec->outputs. Internal to core/ops; everyone else reaches
// them through FindOp.
absl::Status InferAdd(KernelSpec* spec);
absl::Status InferConstant(KernelSpec* spec);
absl::Status InferConv(KernelSpec* spec);
absl::Status InferFlatten(KernelSpec* spec);
absl::Status InferGemm(KernelSpec* spec);
absl::Status InferGlobalAveragePool(KernelSpec* spec);
absl::Status InferIdentity(KernelSpec* spec);
absl::Status InferMatMul(KernelSpec* spec);
absl::Status InferMaxPool(KernelSpec* spec);
absl::Status InferMul(KernelSpec* spec);
absl::Status InferRelu(KernelSpec* spec);
// Needs input 1 ('shape') in spec.constant_inputs; Unimplemented without it.
absl::Status InferReshape(KernelSpec* spec);
absl::Status InferSoftmax(KernelSpec* spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_SHAPE_RULES_H_
