#ifndef REPLICAD_CORE_OPS_AXIS_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_AXIS_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// The ops that work along one axis of input 0, each line of it on its own:
// ArgMax, ArgMin, Hardmax, CumSum and TopK. Their kernels see input 0 as
// [outer, axis_dim, inner] (row-major) and walk each of the outer x inner
// lines of axis_dim elements, `inner` apart.
struct AxisLines {
  int64_t axis = 0;  // Normalized to [0, rank).
  int64_t outer = 1;
  int64_t axis_dim = 1;
  int64_t inner = 1;
};

// ArgMax and ArgMin: the int64 index of the first (select_last_index: last)
// greatest or least element of each line; NaN counts as greater and less
// than every number, as numpy's argmax does. axis default 0, keepdims
// default 1. Data of any number type; an empty line is an error.
struct ArgReduceAttributes {
  AxisLines lines;
  bool keepdims = true;
  bool last_index = false;
};
absl::StatusOr<ArgReduceAttributes> ParseArgReduce(const KernelSpec& spec);

// Hardmax: 1 at the first greatest element of each line, 0 elsewhere.
// Through opset 12 the input is seen as 2-D, [dims before axis, the rest]
// (axis default 1); from 13 the line is along axis (default -1). float32.
absl::StatusOr<AxisLines> ParseHardmax(const KernelSpec& spec);

// CumSum: running sums along the axis given as input 1 (a 0-D or 1-element
// int32/int64 tensor known when the plan is made). exclusive leaves each
// element out of its own sum; reverse sums from the end. float32, int32 or
// int64.
struct CumSumAttributes {
  AxisLines lines;
  bool exclusive = false;
  bool reverse = false;
};
absl::StatusOr<CumSumAttributes> ParseCumSum(const KernelSpec& spec);

// TopK: the k greatest (largest, default 1) or least elements of each line
// and their int64 indices, in order of value (sorted; equal values in order
// of index), outputs of shape input's with the axis (default -1) set to k.
// k is attribute 'k' through opset 9 and input 1 'K' (one int64) from 10,
// which must be known when the plan is made: an output shape that depends on
// the request's data is Unimplemented. NaN sorts above every number (first
// among the largest, last among the smallest, as PyTorch's topk does).
struct TopKAttributes {
  AxisLines lines;
  int64_t k = 0;
  bool largest = true;
};
absl::StatusOr<TopKAttributes> ParseTopK(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_AXIS_ATTRIBUTES_H_
