#include <math_constants.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "core/backends/cuda/kernels/index_map_launch.h"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {
namespace {

template <typename T>
__global__ void IndexMapKernel(const T* in, T* out, int64_t n, DeviceIndexMap map) {
  T fill;
  memcpy(&fill, &map.fill_bits, sizeof(T));
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t rest = i;
    int64_t offset = 0;
    bool filled = false;
    for (int d = map.rank - 1; d >= 0; --d) {
      const int64_t coordinate = rest % map.dims[d];
      rest /= map.dims[d];
      const int64_t entry = map.table[map.begin[d] + coordinate];
      filled |= entry == -1;
      offset += entry;
    }
    out[i] = filled ? fill : in[offset];
  }
}

template <typename T>
__global__ void GatherKernel(const T* data, const int64_t* indices, T* out, int64_t n,
                             int64_t axis_dim, int64_t inner, int64_t num_indices) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t within = i % inner;
    const int64_t rest = i / inner;
    const int64_t j = rest % num_indices;
    const int64_t row = rest / num_indices;
    int64_t index = indices[j];
    if (index < 0) index += axis_dim;
    // The host checked every index; this keeps a read in bounds regardless.
    out[i] =
        index >= 0 && index < axis_dim ? data[(row * axis_dim + index) * inner + within] : T{0};
  }
}

// A reduction's identity, how an element enters it, how two partials
// combine and what is written: the CPU's reduce_kernel.cc semantics (the max
// and min keep a NaN; L2 is sqrt of the sum of squares, LogSum log of the sum).
// The max's and the min's identities: -inf and +inf, or an integer type's
// extremes.
__device__ float Lowest(float) { return -CUDART_INF_F; }
__device__ float Highest(float) { return CUDART_INF_F; }
__device__ int64_t Lowest(int64_t) { return INT64_MIN; }
__device__ int64_t Highest(int64_t) { return INT64_MAX; }

template <typename T>
__device__ T Identity(TableReduction kind) {
  switch (kind) {
    case TableReduction::kMax:
      return Lowest(T{});
    case TableReduction::kMin:
      return Highest(T{});
    case TableReduction::kProd:
      return T{1};
    default:
      return T{0};
  }
}

template <typename T>
__device__ T Element(TableReduction kind, T x) {
  switch (kind) {
    case TableReduction::kL1:
      return x < 0 ? static_cast<T>(-x) : x;
    case TableReduction::kL2:
    case TableReduction::kSumSquare:
      return static_cast<T>(x * x);
    default:
      return x;
  }
}

template <typename T>
__device__ T Merge(TableReduction kind, T acc, T x) {
  switch (kind) {
    case TableReduction::kMax:
      return x > acc || x != x ? x : acc;
    case TableReduction::kMin:
      return x < acc || x != x ? x : acc;
    case TableReduction::kProd:
      return static_cast<T>(acc * x);
    default:
      return static_cast<T>(acc + x);
  }
}

template <typename T>
__device__ T Finish(TableReduction kind, T acc, float scale) {
  if constexpr (std::is_floating_point_v<T>) {
    if (kind == TableReduction::kL2) return sqrtf(acc);
    if (kind == TableReduction::kLogSum) return logf(acc);
    if (kind == TableReduction::kSum) return acc * scale;
  }
  return acc;
}

// One block per output element (grid-stride over outputs): the block's
// threads stride over the reduced elements, then a shared-memory tree merges
// their partials, so a reduction of a million elements into one output is
// not left to a single thread.
template <typename T>
__global__ void TableReduceKernel(const T* in, T* out, int64_t n_out, const int64_t* bases,
                                  const int64_t* offsets, int64_t n_reduced, TableReduction kind,
                                  float scale) {
  __shared__ T partial[kThreadsPerBlock];
  // The block's `kind` reduction of f(x) over output o's elements, to
  // every thread.
  const auto reduce = [&](int64_t o, TableReduction kind, auto f) {
    T acc = Identity<T>(kind);
    const T* base = in + bases[o];
    for (int64_t r = threadIdx.x; r < n_reduced; r += blockDim.x) {
      acc = Merge(kind, acc, f(base[offsets[r]]));
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kThreadsPerBlock / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) {
        partial[threadIdx.x] = Merge(kind, partial[threadIdx.x], partial[threadIdx.x + width]);
      }
      __syncthreads();
    }
    const T result = partial[0];
    __syncthreads();  // partial[] is reused by the next reduction.
    return result;
  };
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    if constexpr (std::is_floating_point_v<T>) {
      if (kind == TableReduction::kLogSumExp) {
        // The CPU's two passes: the max first, so exp does not overflow;
        // an infinite max (all -inf, or a +inf) gives itself.
        T max = reduce(o, TableReduction::kMax, [](T x) { return x; });
        if (isinf(max) && max < 0) max = 0;
        const T sum =
            reduce(o, TableReduction::kSum, [max](T x) { return static_cast<T>(expf(x - max)); });
        if (threadIdx.x == 0) out[o] = isinf(max) ? max : logf(sum) + max;
        continue;
      }
    }
    const T result = reduce(o, kind, [kind](T x) { return Element(kind, x); });
    if (threadIdx.x == 0) out[o] = Finish(kind, result, scale);
  }
}

int ReduceBlocks(int64_t n_out) { return static_cast<int>(n_out < 65535 ? n_out : 65535); }

}  // namespace

void LaunchIndexMap(const void* in, void* out, int64_t n, size_t element_size,
                    const DeviceIndexMap& map, cudaStream_t stream) {
  if (n == 0) return;
  if (element_size == 8) {
    IndexMapKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out), n, map);
  } else {
    IndexMapKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out), n, map);
  }
}

void LaunchGather(const void* data, const int64_t* indices, void* out, int64_t outer,
                  int64_t axis_dim, int64_t inner, int64_t num_indices, size_t element_size,
                  cudaStream_t stream) {
  const int64_t n = outer * num_indices * inner;
  if (n == 0) return;
  if (element_size == 8) {
    GatherKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint64_t*>(data), indices, static_cast<uint64_t*>(out), n, axis_dim,
        inner, num_indices);
  } else {
    GatherKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint32_t*>(data), indices, static_cast<uint32_t*>(out), n, axis_dim,
        inner, num_indices);
  }
}

void LaunchTableReduce(const float* in, float* out, int64_t n_out, const int64_t* bases,
                       const int64_t* offsets, int64_t n_reduced, TableReduction kind, float scale,
                       cudaStream_t stream) {
  if (n_out == 0) return;
  TableReduceKernel<float><<<ReduceBlocks(n_out), kThreadsPerBlock, 0, stream>>>(
      in, out, n_out, bases, offsets, n_reduced, kind, scale);
}

void LaunchTableReduce(const int64_t* in, int64_t* out, int64_t n_out, const int64_t* bases,
                       const int64_t* offsets, int64_t n_reduced, TableReduction kind,
                       cudaStream_t stream) {
  if (n_out == 0) return;
  TableReduceKernel<int64_t><<<ReduceBlocks(n_out), kThreadsPerBlock, 0, stream>>>(
      in, out, n_out, bases, offsets, n_reduced, kind, 1.0f);
}

}  // namespace replicad
