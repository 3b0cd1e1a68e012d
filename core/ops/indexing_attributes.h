#ifndef REPLICAD_CORE_OPS_INDEXING_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_INDEXING_ATTRIBUTES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/kernel.h"
#include "core/ops/sequence_attributes.h"
#include "core/tensor/shape.h"

namespace replicad {

// Ops whose reads or writes are chosen by an index tensor of the request:
// GatherElements, GatherND and OneHot (and ScatterND's index check). Index
// values are data, so they are checked when the kernel runs: an index out of
// range is InvalidArgument naming the node, the value, its position and the
// range, and nothing is written.

// GatherElements: output[i_0..i_{r-1}] = data[i_0.. indices[i] ..i_{r-1}]
// with indices[i] replacing i_axis. indices (int32 or int64, negative counts
// from the back) has data's rank and no dim larger than data's (the axis dim
// aside); the output has its shape and data's dtype.
struct GatherElementsLayout {
  int64_t axis = 0;
  Shape data;
  Shape indices;
};
absl::StatusOr<GatherElementsLayout> ParseGatherElements(const KernelSpec& spec);

// ScatterElements (opsets 11-16): output = data with updates[i] written at
// the element of data that indices[i] names along axis (as GatherElements
// reads it); updates has indices' shape and data's dtype. reduction (opset
// 16) "add" or "mul" combines with what is there instead
// (ParseScatterReduction); the default "none" writes, the later of two
// updates to one element winning.
struct ScatterElementsLayout {
  GatherElementsLayout elements;
  ScatterReduction reduction = ScatterReduction::kNone;
};
absl::StatusOr<ScatterElementsLayout> ParseScatterElements(const KernelSpec& spec);

// GatherElements' and ScatterElements' check of their indices, one function
// for every backend: OK when each of the `count` indices lies in
// [-axis_dim, axis_dim); else InvalidArgument as CheckIndexTuples' (tuples
// of one index) for the first that does not.
absl::Status CheckElementIndices(absl::string_view node, const int32_t* indices, int64_t count,
                                 int64_t axis_dim);
absl::Status CheckElementIndices(absl::string_view node, const int64_t* indices, int64_t count,
                                 int64_t axis_dim);

// GatherND: data [d_0..d_{r-1}], indices [i_0..i_{q-2}, k] (int64) with the
// first batch_dims dims shared and k <= r - batch_dims. Each of the `count`
// index tuples picks the slice data[batch][t_0..t_{k-1}] of `slice` elements;
// the output is [i_0..i_{q-2}, d_{b+k}..d_{r-1}].
struct GatherNdLayout {
  int64_t batches = 1;                 // prod(d_0..d_{b-1})
  int64_t count_per_batch = 1;         // Index tuples per batch.
  int64_t batch_stride = 0;            // Elements of data per batch.
  int64_t tuple = 0;                   // k
  int64_t slice = 1;                   // prod(d_{b+k}..d_{r-1})
  std::vector<int64_t> tuple_dims;     // d_b..d_{b+k-1}
  std::vector<int64_t> tuple_strides;  // Elements per step of each.
};
absl::StatusOr<GatherNdLayout> ParseGatherNd(const KernelSpec& spec);

// OneHot: indices (any number type; a float is truncated) to an output of
// values' dtype with a new dim of `depth` (input 1, one number known when
// the plan is made) at axis (default -1): values[1] where the position equals
// the index (a negative index counts from depth's end), values[0] elsewhere.
// An index outside [-depth, depth) gives a line of values[0], as ONNX says.
struct OneHotLayout {
  int64_t depth = 0;
  int64_t outer = 1;  // Index elements before the axis' position...
  int64_t inner = 1;  // ... and after it.
};
absl::StatusOr<OneHotLayout> ParseOneHot(const KernelSpec& spec);

// OK when each of the `count` tuples of `dims.size()` indices (row-major,
// back to back) lies in [-dims[d], dims[d]); else InvalidArgument naming
// `node`, input 'indices', the value, its position and the range.
absl::Status CheckIndexTuples(absl::string_view node, const int64_t* indices, int64_t count,
                              const std::vector<int64_t>& dims);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_INDEXING_ATTRIBUTES_H_
