#ifndef REPLICAD_CORE_OPS_REDUCE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_REDUCE_ATTRIBUTES_H_

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// The reductions of input 0 'data' over a set of axes: ReduceSum, ReduceMean,
// ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
// ReduceLogSum and ReduceLogSumExp.
//
// The axes come from the `axes` attribute (ReduceSum through opset 12, the
// others through 17) or from input 1 'axes' (ReduceSum from opset 13, the
// others from 18), which must then be known when the plan is made. No axes
// means every axis, unless noop_with_empty_axes (input form only) is set:
// then the op is the identity. keepdims (default 1) keeps reduced dims as 1s.
// Over no elements (a reduced dim of 0) each gives its identity, as ONNX
// says: 0 for the sums, 1 for the product, -inf (the type's lowest) for the
// max, +inf (its highest) for the min, -inf for the logarithms; a float mean
// is NaN (0 / 0) and an integer one 0.
enum class ReduceKind {
  kSum,
  kMean,
  kMax,
  kMin,
  kProd,
  kL1,         // sum |x|
  kL2,         // sqrt(sum x^2)
  kSumSquare,  // sum x^2
  kLogSum,     // log(sum x)
  kLogSumExp,  // log(sum exp(x)), computed as max + log(sum exp(x - max))
};

// The kind of reduction spec's Reduce* op computes;
// Unimplemented for another op.
absl::StatusOr<ReduceKind> ReduceKindOf(const KernelSpec& spec);

struct ReduceLayout {
  ReduceKind kind = ReduceKind::kSum;
  // data's shape with every reduced dim set to 1. The output holds its
  // elements in this order whatever keepdims says; equal to data's shape when
  // nothing is reduced (no-op, or only dims of size 1).
  Shape reduced;
  Shape output;  // `reduced`, less the reduced dims when keepdims is 0.
  // No axes with noop_with_empty_axes: output = input, whatever the kind.
  bool noop = false;
};

// Validates the node (data of a number type: float32 for L2 and the
// logarithms, float32, int32 or int64 for Sum and Mean; axes in [-rank,
// rank), no repeats). InvalidArgument naming the node, the attribute or input, the
// expected and the received value; Unimplemented when input 1 'axes' is not
// known at plan time.
absl::StatusOr<ReduceLayout> ParseReduce(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_REDUCE_ATTRIBUTES_H_
