#ifndef REPLICAD_CORE_OPS_ACTIVATION_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_ACTIVATION_ATTRIBUTES_H_

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// The float attributes of the element-wise activations, with ONNX's defaults
// applied, so that shape rules and kernels read them the same way:
//   LeakyRelu    y = x >= 0 ? x : alpha * x            alpha (0.01)
//   HardSigmoid  y = max(0, min(1, alpha * x + beta))  alpha (0.2), beta (0.5)
//   Elu          y = x >= 0 ? x : alpha * (exp(x) - 1)  alpha (1.0)
//   Selu         y = gamma * (x > 0 ? x : alpha * (exp(x) - 1))
//                                                      alpha (1.67326...), beta = gamma (1.0507...)
// Every other op has no such attribute and reads as zeros.
struct ActivationAttributes {
  float alpha = 0.0f;
  float beta = 0.0f;
};

// InvalidArgument naming the node and the attribute when one is present with
// a type other than FLOAT.
absl::StatusOr<ActivationAttributes> ParseActivationAttributes(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_ACTIVATION_ATTRIBUTES_H_
