#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INDEXING_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INDEXING_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/ops/sequence_attributes.h"

namespace replicad {

// Internal to the CUDA kernels: launchers of the ops whose reads or writes an
// index tensor chooses (indexing.cu; core/ops/indexing_attributes.h and
// ScatterND in sequence_attributes.h). Same conventions as
// elementwise_launch.h. Indices are int64 in device memory and already
// checked on the host against the ranges below (negative ones count from
// the end); an index that is not is skipped (a gather writes 0), so no
// launch reads or writes out of bounds. The scatters apply their updates on
// top of `out`, which the caller has filled with data; every target element
// sees its updates in the CPU kernels' order, so the answers are theirs bit
// for bit. Elements of `element_size` bytes (4 or 8) are copied as bits.

// GatherElements and ScatterElements: indices of `rank` dims (at most
// kMaxRank), each naming an element of data along `axis`, in [-axis_dim,
// axis_dim).
struct ElementsGeometry {
  int rank = 0;
  int axis = 0;
  int64_t axis_dim = 0;                 // data's dim along axis.
  int64_t indices_dims[kMaxRank] = {};  // Also updates' and GatherElements' output's.
  int64_t data_strides[kMaxRank] = {};  // Elements per step of each of data's dims.
};

// out[i] = data[i with indices[i] along axis], one thread per element of out.
void LaunchGatherElements(const void* data, const int64_t* indices, void* out,
                          const ElementsGeometry& geometry, size_t element_size,
                          cudaStream_t stream);

// out[target of i] = ScatterCombine(reduction, out[target], updates[i]) in
// row-major order of i. Only the updates of one line of indices along the
// axis can share a target, so one thread walks each line in order: lines in
// parallel, a line's axis_dim updates one after another.
void LaunchScatterElements(const float* updates, const int64_t* indices, float* out,
                           const ElementsGeometry& geometry, ScatterReduction reduction,
                           cudaStream_t stream);
void LaunchScatterElements(const int64_t* updates, const int64_t* indices, int64_t* out,
                           const ElementsGeometry& geometry, ScatterReduction reduction,
                           cudaStream_t stream);

// GatherND and ScatterND: tuples of `tuple` indices (at most kMaxRank), index
// d in [-dims[d], dims[d]) and `strides[d]` elements per step.
struct TupleGeometry {
  int tuple = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

// GatherND (GatherNdLayout): out is [batches, count_per_batch, slice]; each
// tuple picks `slice` elements at batch * batch_stride plus its offset.
void LaunchGatherNd(const void* data, const int64_t* indices, void* out, int64_t batches,
                    int64_t count_per_batch, int64_t batch_stride, int64_t slice,
                    const TupleGeometry& geometry, size_t element_size, cudaStream_t stream);

// ScatterND (ScatterNdLayout): the `count` update slices of `slice` elements
// combined onto out at their tuples' offsets, in order. One thread per slice
// element walks all `count` updates: slice elements in parallel, updates one
// after another (a k = rank scatter of scalars is one thread's loop).
void LaunchScatterNd(const float* updates, const int64_t* indices, float* out, int64_t count,
                     int64_t slice, const TupleGeometry& geometry, ScatterReduction reduction,
                     cudaStream_t stream);
void LaunchScatterNd(const int64_t* updates, const int64_t* indices, int64_t* out, int64_t count,
                     int64_t slice, const TupleGeometry& geometry, ScatterReduction reduction,
                     cudaStream_t stream);

// OneHot (OneHotLayout): out [outer, depth, inner] is values[1] where the
// position along depth equals the index (float ones truncated; negative ones
// count from depth's end), values[0] elsewhere, an index outside [-depth,
// depth) (or a NaN) giving a line of values[0]. `values` is the device's
// two-element input; one thread per output element.
void LaunchOneHot(const float* indices, const void* values, void* out, int64_t outer, int64_t depth,
                  int64_t inner, size_t element_size, cudaStream_t stream);
void LaunchOneHot(const int64_t* indices, const void* values, void* out, int64_t outer,
                  int64_t depth, int64_t inner, size_t element_size, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INDEXING_LAUNCH_H_
