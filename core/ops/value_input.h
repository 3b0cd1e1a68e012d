#ifndef REPLICAD_CORE_OPS_VALUE_INPUT_H_
#define REPLICAD_CORE_OPS_VALUE_INPUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/kernel.h"

namespace replicad {

// Reading the inputs that a shape rule needs as values (OpDefinition::
// value_inputs): Slice's starts, Pad's pads, Unsqueeze's axes, Expand's
// shape, ... Internal to core/ops; pure functions, thread-safe.

// The elements of input `index` (called `name` in the ONNX spec), which must
// be 1-D int64 and known when the plan is made. InvalidArgument naming the
// node and input for another type or a constant that disagrees with the
// declared type; Unimplemented when the value is not known at plan time
// (replicad plans static shapes). The input must be present (check HasInput
// first for an optional one).
absl::StatusOr<std::vector<int64_t>> Int64ValueInput(const KernelSpec& spec, int index,
                                                     absl::string_view name);

// Input `index` as a host tensor known when the plan is made, checked against
// its declared type; the same errors as Int64ValueInput, for any dtype and
// rank.
absl::StatusOr<const Tensor*> ValueInput(const KernelSpec& spec, int index, absl::string_view name);

// Maps each of `axes` from [-rank, rank) to [0, rank), in order.
// InvalidArgument naming `what` (the attribute or input), the received axes
// and the rank for an axis out of range or one named twice.
absl::StatusOr<std::vector<int64_t>> NormalizeAxes(const KernelSpec& spec,
                                                   const std::vector<int64_t>& axes, int64_t rank,
                                                   absl::string_view what);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_VALUE_INPUT_H_
