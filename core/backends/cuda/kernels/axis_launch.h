#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_AXIS_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_AXIS_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace replicad {

// Internal to the CUDA backend: the ops along one axis of a tensor viewed as
// [outer, axis_dim, inner] (core/ops/axis_attributes.h), one thread per
// line of axis_dim elements `inner` apart, walking it in order as the CPU
// kernels do (axis_kernels.cc), so the answers are theirs bit for bit.
// Enqueued on `stream`.

// ArgMax (`max`) or ArgMin: the index of the first (`last`: last) best
// element of each line; NaN beats every number.
void LaunchArgReduce(const float* in, int64_t* out, int64_t outer, int64_t axis_dim, int64_t inner,
                     bool max, bool last, cudaStream_t stream);
void LaunchArgReduce(const int64_t* in, int64_t* out, int64_t outer, int64_t axis_dim,
                     int64_t inner, bool max, bool last, cudaStream_t stream);

// Hardmax: 1 at the first greatest element of each line, 0 elsewhere.
void LaunchHardmax(const float* in, float* out, int64_t outer, int64_t axis_dim, int64_t inner,
                   cudaStream_t stream);

// CumSum: running sums in line order (`reverse`: from the end), each element
// left out of its own (`exclusive`).
void LaunchCumSum(const float* in, float* out, int64_t outer, int64_t axis_dim, int64_t inner,
                  bool exclusive, bool reverse, cudaStream_t stream);
void LaunchCumSum(const int64_t* in, int64_t* out, int64_t outer, int64_t axis_dim, int64_t inner,
                  bool exclusive, bool reverse, cudaStream_t stream);

// Trilu of `matrices` matrices [rows, cols] of `element_size`-byte elements
// (4 or 8): upper keeps column >= row + k, lower column <= row + k, zeros
// elsewhere.
void LaunchTrilu(const void* in, void* out, int64_t matrices, int64_t rows, int64_t cols, int64_t k,
                 bool upper, size_t element_size, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_AXIS_LAUNCH_H_
