#ifndef REPLICAD_CORE_OPS_QUANTIZATION_MATH_H_
#define REPLICAD_CORE_OPS_QUANTIZATION_MATH_H_

#include <cmath>
#include <cstdint>

#include "core/ops/exact_float.h"
#include "core/ops/host_device.h"

// Linear quantization of one value (quantize_attributes.h), written once for
// every kernel that quantizes, on either backend: the CPU kernels and the
// CUDA ones (.cu files include this header) round and saturate alike, so a
// GPU slot writes the CPU's bytes. Free of absl.
//
// Every float operation is rounded on its own, in float32, in the order
// written here: device code spells it with a round-to-nearest intrinsic,
// which nvcc never fuses into an FMA (its default --fmad=true would), and
// rounds half to even with rintf, as std::nearbyint does on the host in the
// default rounding mode (host builds must not contract either: no
// -ffp-contract=fast with FMA targets).

namespace replicad {

// The values a quantized type holds (std::numeric_limits is host-only).
template <typename Q>
struct QuantizedRange;
template <>
struct QuantizedRange<uint8_t> {
  static constexpr int32_t kLowest = 0;
  static constexpr int32_t kHighest = 255;
};
template <>
struct QuantizedRange<int8_t> {
  static constexpr int32_t kLowest = -128;
  static constexpr int32_t kHighest = 127;
};

// `value` (already rounded, zero point added) saturated to Q's range; NaN
// becomes Q's lowest value, as ONNX Runtime's kernels give it.
template <typename Q>
REPLICAD_HOST_DEVICE inline Q SaturateQuantized(float value) {
  constexpr float kLowest = static_cast<float>(QuantizedRange<Q>::kLowest);
  constexpr float kHighest = static_cast<float>(QuantizedRange<Q>::kHighest);
  if (!(value >= kLowest)) return static_cast<Q>(QuantizedRange<Q>::kLowest);
  if (value > kHighest) return static_cast<Q>(QuantizedRange<Q>::kHighest);
  return static_cast<Q>(value);
}

// round(x / scale) + zero_point, rounding half to even, saturated.
template <typename Q>
REPLICAD_HOST_DEVICE inline Q QuantizeValue(float x, float scale, int32_t zero_point) {
  namespace math = exact_float;
  return SaturateQuantized<Q>(
      math::Add(math::RoundHalfToEven(math::Div(x, scale)), static_cast<float>(zero_point)));
}

// (quantized - zero_point) * scale: the difference in int32, then float32.
REPLICAD_HOST_DEVICE inline float DequantizeValue(int32_t quantized, float scale,
                                                  int32_t zero_point) {
  return exact_float::Mul(static_cast<float>(quantized - zero_point), scale);
}

// The requantizing multiplier of an integer product: a_scale * b_scale /
// y_scale, in the float order ONNX Runtime computes it in.
REPLICAD_HOST_DEVICE inline float RequantizeMultiplier(float a_scale, float b_scale,
                                                       float y_scale) {
  return exact_float::Div(exact_float::Mul(a_scale, b_scale), y_scale);
}

// An exact integer sum requantized: round(sum * multiplier) + zero_point.
template <typename Q>
REPLICAD_HOST_DEVICE inline Q RequantizeSum(int32_t sum, float multiplier, int32_t zero_point) {
  namespace math = exact_float;
  return SaturateQuantized<Q>(
      math::Add(math::RoundHalfToEven(math::Mul(static_cast<float>(sum), multiplier)),
                static_cast<float>(zero_point)));
}

// DynamicQuantizeLinear's scale for a range [low, high] that holds 0 (NaNs
// left out): (high - low) / 255, or 1 for a tensor of zeros, as ONNX Runtime
// gives it.
REPLICAD_HOST_DEVICE inline float DynamicQuantizationScale(float low, float high) {
  namespace math = exact_float;
  return high == low ? 1.0f : math::Div(math::Sub(high, low), 255.0f);
}

// DynamicQuantizeLinear's zero point: round(0 - low / scale), saturated.
REPLICAD_HOST_DEVICE inline uint8_t DynamicQuantizationZeroPoint(float low, float scale) {
  namespace math = exact_float;
  return SaturateQuantized<uint8_t>(math::RoundHalfToEven(math::Sub(0.0f, math::Div(low, scale))));
}

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_QUANTIZATION_MATH_H_
