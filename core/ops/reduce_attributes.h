#ifndef REPLICAD_CORE_OPS_REDUCE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_REDUCE_ATTRIBUTES_H_

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// ReduceSum and ReduceMean of input 0 'data' over a set of axes.
//
// The axes come from the `axes` attribute (ReduceMean through opset 17,
// ReduceSum through 12) or from input 1 'axes' (ReduceSum from opset 13,
// ReduceMean from 18), which must then be known when the plan is made. No
// axes means every axis, unless noop_with_empty_axes (input form only) is set:
// then the op is the identity. keepdims (default 1) keeps reduced dims as 1s.
struct ReduceLayout {
  // data's shape with every reduced dim set to 1. The output holds its
  // elements in this order whatever keepdims says; equal to data's shape when
  // nothing is reduced (no-op, or only dims of size 1).
  Shape reduced;
  Shape output;  // `reduced`, less the reduced dims when keepdims is 0.
};

// Validates the node (data float32 or int64; axes in [-rank, rank), no
// repeats). InvalidArgument naming the node, the attribute or input, the
// expected and the received value; Unimplemented when input 1 'axes' is not
// known at plan time.
absl::StatusOr<ReduceLayout> ParseReduce(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_REDUCE_ATTRIBUTES_H_
