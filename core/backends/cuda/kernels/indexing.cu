#include <cstdint>

#include "core/backends/cuda/kernels/indexing_launch.h"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {
namespace {

// An index as a position in [0, dim) (a negative one counts from the end),
// or -1 for one outside [-dim, dim): the host checked them, and a skipped
// element is still better than a read or write out of bounds.
__device__ int64_t Position(int64_t index, int64_t dim) {
  if (index < 0) index += dim;
  return index >= 0 && index < dim ? index : -1;
}

// The element offset a tuple of indices names, or -1.
__device__ int64_t TupleOffset(const int64_t* tuple, const TupleGeometry& g) {
  int64_t offset = 0;
  for (int d = 0; d < g.tuple; ++d) {
    const int64_t position = Position(tuple[d], g.dims[d]);
    if (position < 0) return -1;
    offset += position * g.strides[d];
  }
  return offset;
}

// ScatterCombine (sequence_attributes.h) on the device: std::max and
// std::min's comparisons, so a NaN already there stays and a NaN update is
// passed over, as on the CPU.
template <typename T>
__device__ T Combine(ScatterReduction reduction, T old, T update) {
  switch (reduction) {
    case ScatterReduction::kAdd:
      return static_cast<T>(old + update);
    case ScatterReduction::kMul:
      return static_cast<T>(old * update);
    case ScatterReduction::kMax:
      return old < update ? update : old;
    case ScatterReduction::kMin:
      return update < old ? update : old;
    case ScatterReduction::kNone:
      break;
  }
  return update;
}

template <typename T>
__global__ void GatherElementsKernel(const T* data, const int64_t* indices, T* out, int64_t n,
                                     ElementsGeometry g) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t rest = i;
    int64_t offset = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t coordinate = rest % g.indices_dims[d];
      rest /= g.indices_dims[d];
      if (d != g.axis) offset += coordinate * g.data_strides[d];
    }
    const int64_t position = Position(indices[i], g.axis_dim);
    out[i] = position >= 0 ? data[offset + position * g.data_strides[g.axis]] : T{0};
  }
}

// Line l is a position of indices with its axis coordinate left out; its
// updates are indices' elements along the axis from there, which the CPU
// applies in this order (row-major order of indices visits them so).
template <typename T>
__global__ void ScatterElementsKernel(const T* updates, const int64_t* indices, T* out,
                                      int64_t lines, ElementsGeometry g,
                                      ScatterReduction reduction) {
  REPLICAD_GRID_STRIDE_LOOP(l, lines) {
    int64_t rest = l;
    int64_t first = 0;  // Element of indices (and updates) that starts the line.
    int64_t base = 0;   // Element of out at axis position 0.
    int64_t step = 1;   // Elements of indices per step along the axis.
    int64_t stride = 1;
    for (int d = g.rank - 1; d >= 0; --d) {
      if (d == g.axis) {
        step = stride;
      } else {
        const int64_t coordinate = rest % g.indices_dims[d];
        rest /= g.indices_dims[d];
        first += coordinate * stride;
        base += coordinate * g.data_strides[d];
      }
      stride *= g.indices_dims[d];
    }
    for (int64_t j = 0; j < g.indices_dims[g.axis]; ++j) {
      const int64_t u = first + j * step;
      const int64_t position = Position(indices[u], g.axis_dim);
      if (position < 0) continue;
      T* target = out + base + position * g.data_strides[g.axis];
      *target = Combine(reduction, *target, updates[u]);
    }
  }
}

template <typename T>
__global__ void GatherNdKernel(const T* data, const int64_t* indices, T* out, int64_t n,
                               int64_t count_per_batch, int64_t batch_stride, int64_t slice,
                               TupleGeometry g) {
  REPLICAD_GRID_STRIDE_LOOP(o, n) {
    const int64_t tuple = o / slice;
    const int64_t offset = TupleOffset(indices + tuple * g.tuple, g);
    out[o] =
        offset >= 0 ? data[(tuple / count_per_batch) * batch_stride + offset + o % slice] : T{0};
  }
}

// Thread i owns element i of every slice, so the updates meeting at one
// element of out arrive in the CPU's order (n ascending).
template <typename T>
__global__ void ScatterNdKernel(const T* updates, const int64_t* indices, T* out, int64_t count,
                                int64_t slice, TupleGeometry g, ScatterReduction reduction) {
  REPLICAD_GRID_STRIDE_LOOP(i, slice) {
    for (int64_t n = 0; n < count; ++n) {
      const int64_t offset = TupleOffset(indices + n * g.tuple, g);
      if (offset < 0) continue;
      T* target = out + offset + i;
      *target = Combine(reduction, *target, updates[n * slice + i]);
    }
  }
}

// The CPU's reading of a OneHot index: a float truncated toward zero, NaN
// and numbers beyond int64 no position at all.
__device__ bool OneHotIndex(float raw, int64_t* index) {
  if (!(raw > -9.2e18 && raw < 9.2e18)) return false;
  *index = static_cast<int64_t>(raw);
  return true;
}
__device__ bool OneHotIndex(int64_t raw, int64_t* index) {
  *index = raw;
  return true;
}

template <typename Index, typename T>
__global__ void OneHotKernel(const Index* indices, const T* values, T* out, int64_t n,
                             int64_t depth, int64_t inner) {
  const T off = values[0];
  const T on = values[1];
  REPLICAD_GRID_STRIDE_LOOP(e, n) {
    const int64_t j = e % inner;
    const int64_t rest = e / inner;
    int64_t index = 0;
    const bool hot = OneHotIndex(indices[(rest / depth) * inner + j], &index) &&
                     Position(index, depth) == rest % depth;
    out[e] = hot ? on : off;
  }
}

int64_t ElementCount(const ElementsGeometry& g) {
  int64_t n = 1;
  for (int d = 0; d < g.rank; ++d) n *= g.indices_dims[d];
  return n;
}

template <typename T>
void ScatterElements(const T* updates, const int64_t* indices, T* out, const ElementsGeometry& g,
                     ScatterReduction reduction, cudaStream_t stream) {
  const int64_t n = ElementCount(g);
  if (n == 0) return;
  const int64_t lines = n / g.indices_dims[g.axis];
  ScatterElementsKernel<<<BlocksFor(lines), kThreadsPerBlock, 0, stream>>>(updates, indices, out,
                                                                           lines, g, reduction);
}

template <typename T>
void ScatterNd(const T* updates, const int64_t* indices, T* out, int64_t count, int64_t slice,
               const TupleGeometry& g, ScatterReduction reduction, cudaStream_t stream) {
  if (count == 0 || slice == 0) return;
  ScatterNdKernel<<<BlocksFor(slice), kThreadsPerBlock, 0, stream>>>(updates, indices, out, count,
                                                                     slice, g, reduction);
}

template <typename Index>
void OneHot(const Index* indices, const void* values, void* out, int64_t outer, int64_t depth,
            int64_t inner, size_t element_size, cudaStream_t stream) {
  const int64_t n = outer * depth * inner;
  if (n == 0) return;
  if (element_size == 8) {
    OneHotKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        indices, static_cast<const uint64_t*>(values), static_cast<uint64_t*>(out), n, depth,
        inner);
  } else {
    OneHotKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        indices, static_cast<const uint32_t*>(values), static_cast<uint32_t*>(out), n, depth,
        inner);
  }
}

}  // namespace

void LaunchGatherElements(const void* data, const int64_t* indices, void* out,
                          const ElementsGeometry& geometry, size_t element_size,
                          cudaStream_t stream) {
  const int64_t n = ElementCount(geometry);
  if (n == 0) return;
  if (element_size == 8) {
    GatherElementsKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint64_t*>(data), indices, static_cast<uint64_t*>(out), n, geometry);
  } else {
    GatherElementsKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint32_t*>(data), indices, static_cast<uint32_t*>(out), n, geometry);
  }
}

void LaunchScatterElements(const float* updates, const int64_t* indices, float* out,
                           const ElementsGeometry& geometry, ScatterReduction reduction,
                           cudaStream_t stream) {
  ScatterElements(updates, indices, out, geometry, reduction, stream);
}

void LaunchScatterElements(const int64_t* updates, const int64_t* indices, int64_t* out,
                           const ElementsGeometry& geometry, ScatterReduction reduction,
                           cudaStream_t stream) {
  ScatterElements(updates, indices, out, geometry, reduction, stream);
}

void LaunchGatherNd(const void* data, const int64_t* indices, void* out, int64_t batches,
                    int64_t count_per_batch, int64_t batch_stride, int64_t slice,
                    const TupleGeometry& geometry, size_t element_size, cudaStream_t stream) {
  const int64_t n = batches * count_per_batch * slice;
  if (n == 0) return;
  if (element_size == 8) {
    GatherNdKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint64_t*>(data), indices, static_cast<uint64_t*>(out), n,
        count_per_batch, batch_stride, slice, geometry);
  } else {
    GatherNdKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint32_t*>(data), indices, static_cast<uint32_t*>(out), n,
        count_per_batch, batch_stride, slice, geometry);
  }
}

void LaunchScatterNd(const float* updates, const int64_t* indices, float* out, int64_t count,
                     int64_t slice, const TupleGeometry& geometry, ScatterReduction reduction,
                     cudaStream_t stream) {
  ScatterNd(updates, indices, out, count, slice, geometry, reduction, stream);
}

void LaunchScatterNd(const int64_t* updates, const int64_t* indices, int64_t* out, int64_t count,
                     int64_t slice, const TupleGeometry& geometry, ScatterReduction reduction,
                     cudaStream_t stream) {
  ScatterNd(updates, indices, out, count, slice, geometry, reduction, stream);
}

void LaunchOneHot(const float* indices, const void* values, void* out, int64_t outer, int64_t depth,
                  int64_t inner, size_t element_size, cudaStream_t stream) {
  OneHot(indices, values, out, outer, depth, inner, element_size, stream);
}

void LaunchOneHot(const int64_t* indices, const void* values, void* out, int64_t outer,
                  int64_t depth, int64_t inner, size_t element_size, cudaStream_t stream) {
  OneHot(indices, values, out, outer, depth, inner, element_size, stream);
}

}  // namespace replicad
