#ifndef REPLICAD_CORE_OPS_DATA_MOVEMENT_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_DATA_MOVEMENT_ATTRIBUTES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/kernel.h"
#include "core/tensor/tensor.h"

namespace replicad {

// The parsed forms of the data-movement operators, shared by their shape
// rules and the backends' kernels. Each validates the whole node and fails
// with InvalidArgument naming the node, the attribute or input, the expected
// and the received value; Unimplemented where ONNX allows what replicad does
// not compute. Pure functions; thread-safe.

// Transpose: output dim i is input dim perm[i]; `perm` defaults to the input's
// dims reversed and must be a permutation of [0, rank).
absl::StatusOr<std::vector<int64_t>> ParseTransposePerm(const KernelSpec& spec);

// Concat: the concatenation axis in [0, rank) (ONNX allows [-rank, rank)).
// All inputs share dtype and rank and agree on every other dim.
absl::StatusOr<int64_t> ParseConcatAxis(const KernelSpec& spec);

// Concatenation of row-major inputs is, for each of the `outer` =
// prod(output dims before the axis) rows, one contiguous block per input in
// turn, of block_bytes[i] bytes for input i.
struct ConcatLayout {
  int64_t outer = 1;
  std::vector<size_t> block_bytes;

  // With one row (every dim before the axis 1), each input's byte offset in
  // the output: the inputs lie back to back (Kernel::joined_input_offsets).
  // Empty otherwise.
  std::vector<size_t> JoinedOffsets() const;
};
absl::StatusOr<ConcatLayout> ParseConcatLayout(const KernelSpec& spec);

// Gather: the axis of `data` in [0, rank) that int64 `indices` select along;
// the output is data.shape[:axis] + indices.shape + data.shape[axis+1:].
// Index values are checked when the kernel runs, since they are data.
absl::StatusOr<int64_t> ParseGatherAxis(const KernelSpec& spec);

// Gather's data viewed as [outer, axis_dim, inner] elements: each of the
// num_indices indices selects one block of `inner` elements per outer row.
struct GatherLayout {
  int64_t axis = 0;
  int64_t outer = 1;
  int64_t axis_dim = 0;
  int64_t inner = 1;
  int64_t num_indices = 0;
};
absl::StatusOr<GatherLayout> ParseGatherLayout(const KernelSpec& spec);

// InvalidArgument "<node>: input 1 'indices' holds <value> at position <j>;
// expected an index in [-axis_dim, axis_dim - 1]" for the first index out of
// range; OK when all `count` are in range.
absl::Status CheckGatherIndices(absl::string_view node, const int64_t* indices, int64_t count,
                                int64_t axis_dim);

// Shape: the int64 [end - start] host tensor of the input's dims
// [start, end), with opset 15's start/end attributes (negative counts from
// the back; both clamp to [0, rank]). The value depends only on the input's
// type, so it is known when the plan is made.
absl::StatusOr<Tensor> ShapeValue(const KernelSpec& spec);

// ConstantOfShape: the one-element host tensor every output element copies,
// from the `value` attribute (float32 0 when absent).
absl::StatusOr<Tensor> ConstantOfShapeFill(const KernelSpec& spec);

// Cast: the target dtype of attribute `to`. Unimplemented naming the ONNX
// type for a valid target replicad does not hold (FLOAT16, DOUBLE, ...);
// InvalidArgument for a number that is no ONNX type.
absl::StatusOr<DType> ParseCastTarget(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_DATA_MOVEMENT_ATTRIBUTES_H_
