#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_PARALLEL_COPY_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_PARALLEL_COPY_H_

#include <cstddef>

namespace replicad {

// Internal to the CPU kernels: plain copies of activations, which one core
// cannot move at the memory's speed.

// From this many bytes a copy is split across the calling slot's OpenMP
// threads; below it a parallel region costs more than it saves.
inline constexpr size_t kParallelCopyBytes = size_t{256} << 10;

// memcpy(dst, src, bytes), each of the slot's threads copying one
// contiguous share from kParallelCopyBytes on. The ranges must not overlap.
void CopyAcrossThreads(void* dst, const void* src, size_t bytes);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_PARALLEL_COPY_H_
