#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_SUM_CUH_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_SUM_CUH_

#include <cstdint>

#include "core/backends/cuda/kernels/integer_product_launch.h"
#include "core/ops/quantization_math.h"

namespace replicad {

// Internal to our integer product kernels (integer_product.cu,
// integer_gemm.cu): reading 8-bit operands and storing an output channel's
// sum, as the CPU's WriteProductRow stores it.

__device__ inline int32_t EightBitAt(const void* values, bool is_signed, int64_t index) {
  return is_signed ? static_cast<int32_t>(static_cast<const int8_t*>(values)[index])
                   : static_cast<int32_t>(static_cast<const uint8_t*>(values)[index]);
}

// Writes the sum (as int32 bits) of output channel `channel` at y[index]:
// plus the bias, then as it is or requantized.
__device__ inline void WriteSum(uint32_t sum_bits, int64_t channel, int64_t index, void* y,
                                const DeviceProduct& p) {
  if (p.bias != nullptr) sum_bits += static_cast<uint32_t>(p.bias[channel]);
  const int32_t sum = static_cast<int32_t>(sum_bits);
  if (p.output == ProductOutput::kInt32) {
    static_cast<int32_t*>(y)[index] = sum;
    return;
  }
  const float multiplier =
      RequantizeMultiplier(*p.a_scale, p.b_scale[p.b_scale_per_channel ? channel : 0], *p.y_scale);
  if (p.output == ProductOutput::kInt8) {
    static_cast<int8_t*>(y)[index] =
        RequantizeSum<int8_t>(sum, multiplier, EightBitAt(p.y_zero_point, true, 0));
  } else {
    static_cast<uint8_t*>(y)[index] =
        RequantizeSum<uint8_t>(sum, multiplier, EightBitAt(p.y_zero_point, false, 0));
  }
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_SUM_CUH_
