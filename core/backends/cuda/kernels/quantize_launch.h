#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_QUANTIZE_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_QUANTIZE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace replicad {

// Internal to the CUDA kernels: QuantizeLinear, DequantizeLinear and
// DynamicQuantizeLinear (quantize.cu; core/ops/quantize_attributes.h). Same
// conventions as elementwise_launch.h: enqueued on `stream`, pointers are
// device memory, launch errors read with LastLaunchStatus. Each value is
// computed by core/ops/quantization_math.h, as the CPU kernels compute it,
// so the bytes are the CPU backend's. Scales and zero points are read on the
// device when the launch runs (a graph may compute them): nothing waits.

// The element type of a quantized tensor.
enum class QuantizedType { kUint8, kInt8, kInt32 };

// Where the scales and zero points of x's `n` elements apply, x read as
// [outer, channels, inner]: element i takes pair (i / inner) % channels, or
// pair 0 where channels is 1 (per tensor). `zero_points` of the quantized
// type, or nullptr for zero points of 0.
struct QuantizationParameters {
  const float* scales = nullptr;
  const void* zero_points = nullptr;
  int64_t channels = 1;
  int64_t inner = 1;
};

// y[i] = QuantizeValue(x[i], scale, zero point), y uint8 or int8.
void LaunchQuantizeLinear(const float* x, void* y, QuantizedType y_type, int64_t n,
                          const QuantizationParameters& parameters, cudaStream_t stream);

// y[i] = DequantizeValue(x[i], scale, zero point), x uint8, int8 or int32.
void LaunchDequantizeLinear(const void* x, QuantizedType x_type, float* y, int64_t n,
                            const QuantizationParameters& parameters, cudaStream_t stream);

// DynamicQuantizeLinear's scratch: per-block partial ranges (bytes).
size_t DynamicQuantizeLinearWorkspaceBytes();

// DynamicQuantizeLinear of x's `n` elements (n may be 0): the range [min(x,
// 0), max(x, 0)], NaNs left out, reduced in `workspace` (per block, then one
// block over the partials), then *scale and *zero_point as
// DynamicQuantizationScale and DynamicQuantizationZeroPoint give them, then
// y[i] = QuantizeValue(x[i], *scale, *zero_point). Three launches; the
// order the minimum and maximum are found in cannot change the outputs (at
// most the sign of a zero bound, which neither formula sees). `workspace`
// holds DynamicQuantizeLinearWorkspaceBytes().
void LaunchDynamicQuantizeLinear(const float* x, int64_t n, void* workspace, uint8_t* y,
                                 float* scale, uint8_t* zero_point, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_QUANTIZE_LAUNCH_H_
