#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_ROI_ALIGN_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_ROI_ALIGN_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/roi_align_attributes.h"

namespace replicad {

// Internal to the CUDA kernels: RoiAlign (roi_align.cu) for
// cuda_roi_align_kernel.cc. Enqueues on `stream` and returns at once; launch
// errors are read with LastLaunchStatus (cuda_call.h). Pointers are device
// memory: x [N, C, H, W] and rois [R, 4] float32, batch_indices [R] int64
// already checked on the host to lie in [0, N) (CheckRoiBatchIndices; one
// that does not gives its roi's outputs 0, so no launch reads out of X),
// y [R, C, output_height, output_width] float32, sizes those of `a`.
//
// One thread per output element computes its bin with the functions of
// core/ops/roi_align_samples.h, in the CPU kernel's order, so y holds the
// CPU backend's bytes. Nothing is launched for an empty y.
void LaunchRoiAlign(const float* x, const float* rois, const int64_t* batch_indices, float* y,
                    const RoiAlignAttributes& a, int64_t images, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_ROI_ALIGN_LAUNCH_H_
