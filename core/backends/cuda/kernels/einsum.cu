#include <cstdint>

#include "core/backends/cuda/kernels/einsum_launch.h"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {
namespace {

// Rounded products and sums, never contracted into one fused multiply-add,
// as the CPU computes them; int64 wraps as two's complement.
__device__ float Times(float a, float b) { return __fmul_rn(a, b); }
__device__ float Plus(float a, float b) { return __fadd_rn(a, b); }
__device__ int64_t Times(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
__device__ int64_t Plus(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

template <typename T>
__global__ void EinsumLoopKernel(DeviceEinsumLoop loop, EinsumOperands operands, T* out,
                                 int64_t n_out) {
  REPLICAD_GRID_STRIDE_LOOP(o, n_out) {
    int64_t base[kMaxEinsumTerms] = {};
    int64_t rest = o;
    for (int l = loop.output_labels - 1; l >= 0; --l) {
      const int64_t coordinate = rest % loop.sizes[l];
      rest /= loop.sizes[l];
      for (int t = 0; t < loop.terms; ++t) base[t] += coordinate * loop.strides[t][l];
    }
    T sum = 0;
    for (int64_t k = 0; k < loop.inner; ++k) {
      int64_t offset[kMaxEinsumTerms];
      for (int t = 0; t < loop.terms; ++t) offset[t] = base[t];
      int64_t within = k;
      for (int l = loop.labels - 1; l >= loop.output_labels; --l) {
        const int64_t coordinate = within % loop.sizes[l];
        within /= loop.sizes[l];
        for (int t = 0; t < loop.terms; ++t) offset[t] += coordinate * loop.strides[t][l];
      }
      T product = 1;
      for (int t = 0; t < loop.terms; ++t) {
        product = Times(product, static_cast<const T*>(operands.data[t])[offset[t]]);
      }
      sum = Plus(sum, product);
    }
    out[o] = sum;
  }
}

template <typename T>
void Launch(const DeviceEinsumLoop& loop, const EinsumOperands& operands, T* out, int64_t n_out,
            cudaStream_t stream) {
  if (n_out == 0) return;
  EinsumLoopKernel<T>
      <<<BlocksFor(n_out), kThreadsPerBlock, 0, stream>>>(loop, operands, out, n_out);
}

}  // namespace

void LaunchEinsumLoop(const DeviceEinsumLoop& loop, const EinsumOperands& operands, float* out,
                      int64_t n_out, cudaStream_t stream) {
  Launch(loop, operands, out, n_out, stream);
}

void LaunchEinsumLoop(const DeviceEinsumLoop& loop, const EinsumOperands& operands, int64_t* out,
                      int64_t n_out, cudaStream_t stream) {
  Launch(loop, operands, out, n_out, stream);
}

}  // namespace replicad
