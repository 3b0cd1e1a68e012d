#ifndef REPLICAD_CORE_BACKENDS_CUDA_SLOT_REDUCE_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_SLOT_REDUCE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace replicad {

// Internal to the CUDA backend's gradient reduction (slot_reduce.cu): each
// enqueues on `stream` and returns at once; n == 0 launches nothing.

// sum[i] += addend[i]: slots that share a GPU sum there before NCCL runs.
void LaunchAccumulate(float* sum, const float* addend, int64_t n, cudaStream_t stream);
// data[i] *= scale: the mean over the global batch, after the sum (the
// order the host reduction uses).
void LaunchScale(float* data, int64_t n, float scale, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_SLOT_REDUCE_LAUNCH_H_
