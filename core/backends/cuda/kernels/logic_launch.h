#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LOGIC_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LOGIC_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backends/cuda/kernels/elementwise_launch.h"

namespace replicad {

// Internal to the CUDA backend: comparisons, boolean logic, Where and casts
// to and from bool, on device memory, enqueued on `stream`. A bool is one
// byte, 0 or 1 (as replicad's tensors hold it). Inputs broadcast to the
// output by BroadcastIndex (a_strides for the first operand, b_strides for
// the second). A comparison with a NaN is false, as IEEE and the CPU have it.
enum class CudaCompareOp { kEqual, kLess, kLessOrEqual, kGreater, kGreaterOrEqual };
void LaunchCompare(const float* a, const float* b, uint8_t* out, int64_t n, CudaCompareOp op,
                   const BroadcastIndex& index, cudaStream_t stream);
void LaunchCompare(const int64_t* a, const int64_t* b, uint8_t* out, int64_t n, CudaCompareOp op,
                   const BroadcastIndex& index, cudaStream_t stream);
void LaunchCompare(const uint8_t* a, const uint8_t* b, uint8_t* out, int64_t n, CudaCompareOp op,
                   const BroadcastIndex& index, cudaStream_t stream);

enum class CudaLogicOp { kAnd, kOr, kXor };
void LaunchLogic(const uint8_t* a, const uint8_t* b, uint8_t* out, int64_t n, CudaLogicOp op,
                 const BroadcastIndex& index, cudaStream_t stream);
void LaunchNot(const uint8_t* in, uint8_t* out, int64_t n, cudaStream_t stream);

// out = condition ? x : y: `condition_x` broadcasts the condition (a) and x
// (b), `y` the condition again (a, unused) and y (b).
void LaunchWhere(const uint8_t* condition, const float* x, const float* y, float* out, int64_t n,
                 const BroadcastIndex& condition_x, const BroadcastIndex& y_index,
                 cudaStream_t stream);
void LaunchWhere(const uint8_t* condition, const int64_t* x, const int64_t* y, int64_t* out,
                 int64_t n, const BroadcastIndex& condition_x, const BroadcastIndex& y_index,
                 cudaStream_t stream);

// Casts with bool: a number is true where it is not 0 (NaN is true, as
// numpy's), a bool is 0 or 1.
void LaunchToBool(const float* in, uint8_t* out, int64_t n, cudaStream_t stream);
void LaunchToBool(const int64_t* in, uint8_t* out, int64_t n, cudaStream_t stream);
// Bool to bool: any byte but 0 becomes 1 (a request's bools may hold others).
void LaunchToBool(const uint8_t* in, uint8_t* out, int64_t n, cudaStream_t stream);
void LaunchFromBool(const uint8_t* in, float* out, int64_t n, cudaStream_t stream);
void LaunchFromBool(const uint8_t* in, int64_t* out, int64_t n, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LOGIC_LAUNCH_H_
