#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// Add, Sub, Mul and Div: two numbers of one dtype, broadcast together.
absl::Status InferBroadcastBinary(KernelSpec* spec) {
  return InferBroadcastPair(spec, kNumericDTypes, std::nullopt);
}

}  // namespace

absl::Status InferAdd(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferMul(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferSub(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferDiv(KernelSpec* spec) { return InferBroadcastBinary(spec); }

absl::Status InferMod(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t fmod, IntAttribute(*spec, "fmod", 0));
  if (fmod != 0 && fmod != 1) {
    return NodeError(*spec, absl::StrCat("attribute 'fmod' must be 0 or 1, received ", fmod));
  }
  REPLICAD_RETURN_IF_ERROR(InferBroadcastPair(spec, kNumericDTypes, std::nullopt));
  if (spec->inputs[0]->dtype == DType::kFloat32 && fmod == 0) {
    return NodeError(*spec, "attribute 'fmod' must be 1 for float32 inputs, received 0");
  }
  return absl::OkStatus();
}

absl::Status InferRelu(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  // Relu accepts int64 from opset 14 on.
  if (spec->opset >= 14) {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}, {DType::kInt64}));
  } else {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}));
  }
  spec->outputs = {x};
  return absl::OkStatus();
}

}  // namespace replicad
