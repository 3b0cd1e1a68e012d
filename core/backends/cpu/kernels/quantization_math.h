#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_QUANTIZATION_MATH_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_QUANTIZATION_MATH_H_

#include <cmath>
#include <cstdint>
#include <limits>

namespace replicad {

// Internal to the CPU kernels: linear quantization of one value
// (core/ops/quantize_attributes.h), written once for every kernel that
// quantizes, so that QuantizeLinear and the requantizing products round and
// saturate alike.

// `value` (already rounded, zero point added) saturated to Q's range; NaN
// becomes Q's lowest value, as ONNX Runtime's kernels give it.
template <typename Q>
inline Q SaturateQuantized(float value) {
  constexpr float kLowest = static_cast<float>(std::numeric_limits<Q>::lowest());
  constexpr float kHighest = static_cast<float>(std::numeric_limits<Q>::max());
  if (!(value >= kLowest)) return std::numeric_limits<Q>::lowest();
  if (value > kHighest) return std::numeric_limits<Q>::max();
  return static_cast<Q>(value);
}

// round(x / scale) + zero_point, rounding half to even, saturated.
template <typename Q>
inline Q QuantizeValue(float x, float scale, int32_t zero_point) {
  return SaturateQuantized<Q>(std::nearbyint(x / scale) + static_cast<float>(zero_point));
}

// An exact integer sum requantized: round(sum * multiplier) + zero_point,
// with multiplier = a_scale * b_scale / y_scale (the float order ONNX
// Runtime computes it in).
template <typename Q>
inline Q RequantizeSum(int32_t sum, float multiplier, int32_t zero_point) {
  return SaturateQuantized<Q>(std::nearbyint(static_cast<float>(sum) * multiplier) +
                              static_cast<float>(zero_point));
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_QUANTIZATION_MATH_H_
