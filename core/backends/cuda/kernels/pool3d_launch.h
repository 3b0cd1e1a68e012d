#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_POOL3D_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_POOL3D_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/pool3d_window.h"

namespace replicad {

// Internal to the CUDA kernels: 3-D MaxPool and AveragePool (pool3d.cu) for
// cuda_pool3d_kernel.cc. Enqueues on `stream` and returns at once; launch
// errors are read with LastLaunchStatus (cuda_call.h). x is `planes` (N * C)
// row-major planes of the window's axes' sizes, y as many of its out dims,
// both float32 in device memory.
//
// One thread per output element computes it with Pool3dValue
// (core/ops/pool3d_window.h), as the CPU kernel does, so y holds the CPU
// backend's bytes: max with NaN propagation, average with the CPU's
// divisor (count_include_pad, ceil_mode, dilations) and summation order.
// Nothing is launched for an empty y.
void LaunchPool3d(const float* x, float* y, int64_t planes, const Pool3dWindow& window,
                  cudaStream_t stream);

// An int8 model's MaxPool (Pool3dIntegerMax; 2-D windows as Pool3dWindowOf2d
// gives them): x and y int8 where `is_signed`, else uint8, as above.
void LaunchIntegerMaxPool(const void* x, void* y, bool is_signed, int64_t planes,
                          const Pool3dWindow& window, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_POOL3D_LAUNCH_H_
