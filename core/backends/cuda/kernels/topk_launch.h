#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_TOPK_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_TOPK_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace replicad {

// Internal to the CUDA kernels: TopK (core/ops/axis_attributes.h) of input 0
// viewed as [outer, axis_dim, inner], by sorting every line (topk.cu). A
// kernel writes each line's elements contiguously as unsigned keys that sort
// in the CPU kernel's order (NaN above every number, -0 equal to +0, inverted
// for `largest`) with their indices in the line; CUB's stable radix sort
// orders each line (equal keys keep index order); a kernel writes the first
// k of each line. The values are read back from the input by index, so they
// are the input's bits, and the answers are the CPU's exactly.
//
// Preconditions: 1 <= k <= axis_dim, outer * inner >= 1, and
// outer * axis_dim * inner <= INT32_MAX (CUB counts the items in int).
struct TopKShape {
  int64_t outer = 1;
  int64_t axis_dim = 1;
  int64_t inner = 1;
  int64_t k = 1;
  bool largest = true;
  bool int64_data = false;  // int64 data; float32 otherwise.
};

// The device workspace LaunchTopK needs for `shape` (keys and indices twice
// over, and CUB's temporary storage): bytes. Asks CUB, which reads the
// current device's properties (call it where the slot's GPU is current);
// returns CUB's error, if any.
cudaError_t TopKWorkspaceBytes(const TopKShape& shape, size_t* bytes);

// values and indices: [outer, k, inner]. `segment_offsets`: outer * inner + 1
// ints in device memory, entry l being l * axis_dim. `workspace`: device
// memory of TopKWorkspaceBytes(shape) bytes, 16-byte aligned or more (the
// plan's workspace is), scratch that holds nothing before or after the call.
// Enqueues on `stream` and returns the first error of its launches (CUB's
// among them).
cudaError_t LaunchTopK(const float* in, float* values, int64_t* indices, const TopKShape& shape,
                       const int* segment_offsets, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream);
cudaError_t LaunchTopK(const int64_t* in, int64_t* values, int64_t* indices, const TopKShape& shape,
                       const int* segment_offsets, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_TOPK_LAUNCH_H_
