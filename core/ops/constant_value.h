#ifndef REPLICAD_CORE_OPS_CONSTANT_VALUE_H_
#define REPLICAD_CORE_OPS_CONSTANT_VALUE_H_

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/tensor.h"

namespace replicad {

// The host value a Constant node produces, from exactly one of its attributes
// `value` (TENSOR), `value_float`, `value_floats`, `value_int` or
// `value_ints`. The result shares the attribute tensor's Buffer (no copy) for
// `value`. InvalidArgument when the node has inputs or not exactly one value
// attribute; Unimplemented for `sparse_value`, `value_string` and
// `value_strings`, and for tensors that are not in host memory.
absl::StatusOr<Tensor> ConstantValue(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_CONSTANT_VALUE_H_
