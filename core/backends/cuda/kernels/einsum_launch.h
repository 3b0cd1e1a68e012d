#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_EINSUM_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_EINSUM_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace replicad {

// Internal to the CUDA backend: an Einsum that is no batched matrix product,
// as a loop (einsum.cu), one thread per output element. Output element o
// (its labels' coordinates from o, last fastest) is the sum over the other
// labels (odometer order, last fastest) of the product of the inputs'
// elements at sum(coordinate x strides[t][label]) (EinsumLabelStrides), in
// the CPU loop kernel's order with no fused multiply-add, so the answers are
// the CPU's bit for bit. Enqueued on `stream`.
inline constexpr int kMaxEinsumTerms = 4;
inline constexpr int kMaxEinsumLabels = 16;
struct DeviceEinsumLoop {
  int terms = 0;
  int labels = 0;  // Output labels first.
  int output_labels = 0;
  int64_t inner = 1;  // Product of the sizes of the labels not in the output.
  int64_t sizes[kMaxEinsumLabels] = {};
  int64_t strides[kMaxEinsumTerms][kMaxEinsumLabels] = {};
};
// The inputs' device pointers, one per term.
struct EinsumOperands {
  const void* data[kMaxEinsumTerms] = {};
};

void LaunchEinsumLoop(const DeviceEinsumLoop& loop, const EinsumOperands& operands, float* out,
                      int64_t n_out, cudaStream_t stream);
void LaunchEinsumLoop(const DeviceEinsumLoop& loop, const EinsumOperands& operands, int64_t* out,
                      int64_t n_out, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_EINSUM_LAUNCH_H_
