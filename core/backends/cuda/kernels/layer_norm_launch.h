#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAYER_NORM_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAYER_NORM_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace replicad {

// Internal to the CUDA kernels: LayerNormalization of x viewed as [rows,
// cols] (core/ops/layer_norm_attributes.h), one block per row, statistics in
// double. `bias`, `mean` and `inv_std` may be null (no B; outputs not
// asked for). Enqueues on `stream` and returns at once; read launch errors
// with LastLaunchStatus.
void LaunchLayerNorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                     float* inv_std, int64_t rows, int64_t cols, float epsilon,
                     cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAYER_NORM_LAUNCH_H_
