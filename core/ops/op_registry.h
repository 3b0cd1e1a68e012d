#ifndef REPLICAD_CORE_OPS_OP_REGISTRY_H_
#define REPLICAD_CORE_OPS_OP_REGISTRY_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/tensor.h"

namespace replicad {

// Each operator once, independent of any backend: its type and its shape rule.
// (The gradient rule joins it with training.)
struct OpDefinition {
  std::string_view type;  // ONNX op type in the default domain.
  // Checks the attributes and input types of `spec` and sets spec->outputs.
  // InvalidArgument naming the node, the attribute or input, the expected and
  // the received value when the node is malformed; Unimplemented for a valid
  // ONNX form this engine does not compute (e.g. 3-D Conv).
  absl::Status (*infer)(KernelSpec* spec);
  // Bit i set: the shape rule needs input i's value, not just its type
  // (Reshape's `shape`), so it must be known when the plan is made: an
  // initializer, a Constant, or computed from such values at plan time.
  uint32_t value_inputs = 0;
  // For an operator whose output shape is its result (value_shaped.h:
  // NonZero, NonMaxSuppression, If): computes the outputs on the host from
  // the inputs' values. Plans call it, never a device kernel; nullptr for
  // every other operator.
  absl::StatusOr<std::vector<Tensor>> (*evaluate)(const KernelSpec& spec) = nullptr;

  bool NeedsValue(size_t input) const { return input < 32 && ((value_inputs >> input) & 1u); }
};

// The definition for `op_type`, or nullptr when the engine lacks the operator.
const OpDefinition* FindOp(std::string_view op_type);

// What a backend's kernel factory checks before building: `spec` names an
// operator of the engine, has attributes, and its outputs are exactly what
// the op's shape rule infers now, or the first of them where the node leaves
// trailing optional outputs out (a stale or hand-made spec fails here, not
// inside a library). `backend` ("CPU", "CUDA") names the backend in the
// Unimplemented error for an unknown op; otherwise the shape rule's error, or
// InvalidArgument naming the expected and the received outputs.
absl::Status CheckKernelSpec(const KernelSpec& spec, std::string_view backend);

// Every supported ONNX op type, sorted (the engine's own "replicad." operators
// excluded: training's and the optimizer's fused ones).
std::vector<std::string_view> SupportedOps();

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_OP_REGISTRY_H_
