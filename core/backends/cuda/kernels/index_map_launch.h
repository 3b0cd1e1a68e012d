#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INDEX_MAP_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INDEX_MAP_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backends/cuda/kernels/elementwise_launch.h"

namespace replicad {

// Internal to the CUDA kernels: launchers of the table-driven copies,
// gathers and reductions (index_map.cu). Same conventions as elementwise_launch.h.

// An IndexMap (core/ops/index_map.h) in device memory: output element
// (o_0, ..., o_{rank-1}) reads in[table[begin[0] + o_0] + ...], or is
// the fill value when any table entry is IndexMap::kFill (-1).
struct DeviceIndexMap {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t begin[kMaxRank] = {};
  const int64_t* table = nullptr;  // Device memory, owned by the kernel.
  uint64_t fill_bits = 0;
};

// Copies elements of `element_size` bytes (4 or 8) as bit patterns.
void LaunchIndexMap(const void* in, void* out, int64_t n, size_t element_size,
                    const DeviceIndexMap& map, cudaStream_t stream);

// Gather of data viewed as [outer, axis_dim, inner] elements of
// `element_size` bytes (4 or 8) by `num_indices` int64 indices in device
// memory, already checked to lie in [-axis_dim, axis_dim - 1] (negative ones
// count from the end); out is [outer, num_indices, inner].
void LaunchGather(const void* data, const int64_t* indices, void* out, int64_t outer,
                  int64_t axis_dim, int64_t inner, int64_t num_indices, size_t element_size,
                  cudaStream_t stream);

// What a table reduction computes over its elements (ReduceKind's kinds
// but the mean, a kSum with scale 1 / n; kLogSumExp float32 only, in the
// CPU's two passes: the max, then the sum of exp(x - max)).
enum class TableReduction { kSum, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

// out[o] = the `kind` reduction of in[bases[o] + offsets[r]] over r <
// n_reduced, o < n_out (tables in device memory); a float kSum is scaled by
// `scale`. Over no elements each gives its identity (0, -inf, +inf, 1; the
// logarithm's -inf). The max and min keep a NaN. float32 accumulates in
// float32 within a block's tree (as cuDNN's reductions do); int64 exactly.
void LaunchTableReduce(const float* in, float* out, int64_t n_out, const int64_t* bases,
                       const int64_t* offsets, int64_t n_reduced, TableReduction kind, float scale,
                       cudaStream_t stream);
void LaunchTableReduce(const int64_t* in, int64_t* out, int64_t n_out, const int64_t* bases,
                       const int64_t* offsets, int64_t n_reduced, TableReduction kind,
                       cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INDEX_MAP_LAUNCH_H_
