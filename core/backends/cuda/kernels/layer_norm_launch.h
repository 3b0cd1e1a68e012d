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

// InstanceNormalization and GroupNormalization
// (core/ops/group_norm_attributes.h) of x [batch, channels, spatial]: block
// b normalizes (sample, group) b, channels / groups consecutive channels by
// their statistics in double, as the CPU kernel, then applies scale and bias
// per channel (per group where `affine_per_group`).
void LaunchGroupNorm(const float* x, const float* scale, const float* bias, float* y, int64_t batch,
                     int64_t channels, int64_t groups, int64_t spatial, bool affine_per_group,
                     float epsilon, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAYER_NORM_LAUNCH_H_
