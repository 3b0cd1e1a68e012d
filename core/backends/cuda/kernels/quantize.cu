#include <math_constants.h>

#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/quantize_launch.h"
#include "core/ops/quantization_math.h"

namespace replicad {
namespace {

// The parameter pair of element i.
__device__ int64_t ParameterIndex(int64_t i, const QuantizationParameters& p) {
  return p.channels > 1 ? i / p.inner % p.channels : 0;
}

template <typename Q>
__device__ int32_t ZeroPointAt(const void* zero_points, int64_t index) {
  return zero_points == nullptr ? 0 : static_cast<const Q*>(zero_points)[index];
}

template <typename Q>
__global__ void QuantizeLinearKernel(const float* x, Q* y, int64_t n, QuantizationParameters p) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t pair = ParameterIndex(i, p);
    y[i] = QuantizeValue<Q>(x[i], p.scales[pair], ZeroPointAt<Q>(p.zero_points, pair));
  }
}

template <typename Q>
__global__ void DequantizeLinearKernel(const Q* x, float* y, int64_t n, QuantizationParameters p) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t pair = ParameterIndex(i, p);
    y[i] = DequantizeValue(static_cast<int32_t>(x[i]), p.scales[pair],
                           ZeroPointAt<Q>(p.zero_points, pair));
  }
}

// Block-wide minimum and maximum of the values the threads hold, into
// thread 0's `low` and `high`. fminf and fmaxf return the other operand
// where one is NaN, so a NaN never enters a bound (the CPU leaves NaNs out
// the same way), and the minimum and maximum of a set do not depend on the
// order it is reduced in (up to the sign of a zero bound, which neither
// DynamicQuantizationScale nor DynamicQuantizationZeroPoint can tell).
__device__ void ReduceRange(float& low, float& high) {
  __shared__ float lows[kThreadsPerBlock];
  __shared__ float highs[kThreadsPerBlock];
  lows[threadIdx.x] = low;
  highs[threadIdx.x] = high;
  __syncthreads();
  for (int half = kThreadsPerBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      lows[threadIdx.x] = fminf(lows[threadIdx.x], lows[threadIdx.x + half]);
      highs[threadIdx.x] = fmaxf(highs[threadIdx.x], highs[threadIdx.x + half]);
    }
    __syncthreads();
  }
  low = lows[0];
  high = highs[0];
}

// partials[2 * block] and [2 * block + 1]: the block's part of x's range
// (+inf and -inf where it holds no number).
__global__ void PartialRangeKernel(const float* x, int64_t n, float* partials) {
  float low = CUDART_INF_F, high = -CUDART_INF_F;
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    low = fminf(low, x[i]);
    high = fmaxf(high, x[i]);
  }
  ReduceRange(low, high);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = low;
    partials[2 * blockIdx.x + 1] = high;
  }
}

// One block: the range over `count` partials, widened to hold 0 as the CPU
// kernel's reduction (which starts from 0) does, then the scale and zero point.
__global__ void DynamicParametersKernel(const float* partials, int count, float* scale,
                                        uint8_t* zero_point) {
  float low = CUDART_INF_F, high = -CUDART_INF_F;
  for (int b = threadIdx.x; b < count; b += blockDim.x) {
    low = fminf(low, partials[2 * b]);
    high = fmaxf(high, partials[2 * b + 1]);
  }
  ReduceRange(low, high);
  if (threadIdx.x == 0) {
    low = fminf(0.0f, low);
    high = fmaxf(0.0f, high);
    const float s = DynamicQuantizationScale(low, high);
    *scale = s;
    *zero_point = DynamicQuantizationZeroPoint(low, s);
  }
}

__global__ void DynamicQuantizeKernel(const float* x, uint8_t* y, int64_t n, const float* scale,
                                      const uint8_t* zero_point) {
  const float s = *scale;
  const int32_t z = *zero_point;
  REPLICAD_GRID_STRIDE_LOOP(i, n) { y[i] = QuantizeValue<uint8_t>(x[i], s, z); }
}

}  // namespace

void LaunchQuantizeLinear(const float* x, void* y, QuantizedType y_type, int64_t n,
                          const QuantizationParameters& parameters, cudaStream_t stream) {
  if (n == 0) return;
  if (y_type == QuantizedType::kInt8) {
    QuantizeLinearKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, static_cast<int8_t*>(y),
                                                                        n, parameters);
  } else {
    QuantizeLinearKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, static_cast<uint8_t*>(y),
                                                                        n, parameters);
  }
}

void LaunchDequantizeLinear(const void* x, QuantizedType x_type, float* y, int64_t n,
                            const QuantizationParameters& parameters, cudaStream_t stream) {
  if (n == 0) return;
  switch (x_type) {
    case QuantizedType::kInt8:
      DequantizeLinearKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<const int8_t*>(x), y, n, parameters);
      break;
    case QuantizedType::kInt32:
      DequantizeLinearKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<const int32_t*>(x), y, n, parameters);
      break;
    case QuantizedType::kUint8:
      DequantizeLinearKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<const uint8_t*>(x), y, n, parameters);
      break;
  }
}

size_t DynamicQuantizeLinearWorkspaceBytes() { return 2 * kMaxBlocks * sizeof(float); }

void LaunchDynamicQuantizeLinear(const float* x, int64_t n, void* workspace, uint8_t* y,
                                 float* scale, uint8_t* zero_point, cudaStream_t stream) {
  float* partials = static_cast<float*>(workspace);
  // No blocks for an empty x: the range is then [0, 0], scale 1 and zero point 0.
  const int blocks = BlocksFor(n);
  if (blocks > 0) {
    PartialRangeKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(x, n, partials);
  }
  DynamicParametersKernel<<<1, kThreadsPerBlock, 0, stream>>>(partials, blocks, scale, zero_point);
  if (n == 0) return;
  DynamicQuantizeKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(x, y, n, scale, zero_point);
}

}  // namespace replicad
