#ifndef REPLICAD_CORE_OPS_SEQUENCE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_SEQUENCE_ATTRIBUTES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/tensor.h"

namespace replicad {

// The parsed forms of Range, Trilu, Split and ScatterND, shared by their
// shape rules and the backends' kernels: the ops that build positions and
// masks and cut sequences in transformer graphs. Each validates the whole
// node and fails with InvalidArgument naming the node, the attribute or
// input, the expected and the received value; Unimplemented where ONNX
// allows what replicad does not compute. Pure functions; thread-safe.

// Range: the host tensor start, start + delta, ... below limit (above it for
// a negative delta), of start's dtype, computed from the three scalars,
// which must be known when the plan is made (Unimplemented otherwise: the
// output's length is their value). At most 2^31 elements.
absl::StatusOr<Tensor> RangeValue(const KernelSpec& spec);

// Trilu: keeps the elements of each matrix in the last two dims on or above
// (upper) or on or below (lower) diagonal k (input 1, a known int64 scalar,
// default 0), zeroing the rest.
struct TriluLayout {
  bool upper = true;
  int64_t k = 0;
  int64_t matrices = 1;  // Product of the dims before the last two.
  int64_t rows = 0;
  int64_t cols = 0;
};
absl::StatusOr<TriluLayout> ParseTrilu(const KernelSpec& spec);

// Split: the input viewed as [outer, axis_dim, inner] elements, cut along
// the axis into parts of sizes[i] (input 1 from opset 13, the attribute
// before, known when the plan is made; without it, declared_outputs equal
// parts, or opset 18's num_outputs parts of ceil(axis_dim / n), the last
// smaller).
struct SplitLayout {
  int64_t axis = 0;
  int64_t outer = 1;
  int64_t inner = 1;
  std::vector<int64_t> sizes;
};
absl::StatusOr<SplitLayout> ParseSplit(const KernelSpec& spec);

// ScatterND: data [d_0..d_{r-1}], int64 indices [i_0..i_{q-2}, k] with k <= r,
// updates [i_0..i_{q-2}, d_k..d_{r-1}]. The output is data with each of the
// `count` = prod(i_0..i_{q-2}) slices of `slice` elements at the index tuple
// replaced (reduction none) or combined (add, mul, max, min). Index values
// are checked when the kernel runs.
enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };
// The `reduction` attribute of ScatterND and ScatterElements (max and min
// from opset 18; add and mul refused for bool data).
absl::StatusOr<ScatterReduction> ParseScatterReduction(const KernelSpec& spec);
// What an element becomes when `update` is scattered onto `old`.
template <typename T>
T ScatterCombine(ScatterReduction reduction, T old, T update) {
  switch (reduction) {
    case ScatterReduction::kAdd:
      return static_cast<T>(old + update);
    case ScatterReduction::kMul:
      return static_cast<T>(old * update);
    case ScatterReduction::kMax:
      return std::max(old, update);
    case ScatterReduction::kMin:
      return std::min(old, update);
    case ScatterReduction::kNone:
      break;
  }
  return update;
}
struct ScatterNdLayout {
  ScatterReduction reduction = ScatterReduction::kNone;
  int64_t count = 0;
  int64_t tuple = 0;  // k
  int64_t slice = 1;
  std::vector<int64_t> data_dims;  // The first k dims of data.
  std::vector<int64_t> strides;    // Elements per step of each of those dims.
};
absl::StatusOr<ScatterNdLayout> ParseScatterNd(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_SEQUENCE_ATTRIBUTES_H_
