#ifndef REPLICAD_CORE_TENSOR_HALF_FLOAT_H_
#define REPLICAD_CORE_TENSOR_HALF_FLOAT_H_

#include <cstdint>
#include <cstring>

#include "core/tensor/dtype.h"

namespace replicad {

// IEEE 754 binary16 (ONNX FLOAT16, Open Inference Protocol FP16, numpy
// float16) and bfloat16 (ONNX BFLOAT16, OIP BF16: float32's top 16 bits),
// held as their bit patterns. Conversions from float32 round to nearest,
// ties to even, as numpy, PyTorch and ONNX Runtime do; NaN stays NaN (quiet)
// and a value beyond the type's range becomes infinity. Float16 subnormals
// are kept both ways.

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float FloatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// float32 -> binary16 (F. Giesen's float_to_half_fast3_rtne).
inline uint16_t FloatToHalf(float value) {
  uint32_t bits = FloatBits(value);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint32_t half;
  if (bits >= (127u + 16u) << 23) {  // 65536 and up, infinity, NaN.
    half = bits > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (bits < 113u << 23) {  // Below 2^-14: a binary16 subnormal or zero.
    // Adding 0.5 puts the 10 mantissa bits at the bottom of the float, rounded
    // to nearest even by the addition itself.
    const uint32_t magic = 126u << 23;
    half = FloatBits(FloatFromBits(bits) + FloatFromBits(magic)) - magic;
  } else {
    const uint32_t mantissa_odd = (bits >> 13) & 1u;
    bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mantissa_odd;
    half = bits >> 13;  // 65520 and up carry into the exponent: infinity.
  }
  return static_cast<uint16_t>(half | (sign >> 16));
}

// binary16 -> float32, exact.
inline float HalfToFloat(uint16_t half) {
  const uint32_t shifted_exponent = 0x7c00u << 13;
  uint32_t bits = (half & 0x7fffu) << 13;
  const uint32_t exponent = bits & shifted_exponent;
  bits += static_cast<uint32_t>(127 - 15) << 23;
  if (exponent == shifted_exponent) {  // Infinity or NaN.
    bits += static_cast<uint32_t>(128 - 16) << 23;
  } else if (exponent == 0) {  // Zero or subnormal: renormalised by a subtraction.
    bits += 1u << 23;
    bits = FloatBits(FloatFromBits(bits) - FloatFromBits(113u << 23));
  }
  return FloatFromBits(bits | (static_cast<uint32_t>(half & 0x8000u) << 16));
}

// float32 -> bfloat16.
inline uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN, made quiet.
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// bfloat16 -> float32, exact.
inline float BFloat16ToFloat(uint16_t value) {
  return FloatFromBits(static_cast<uint32_t>(value) << 16);
}

// The two above by DType: `dtype` is DType::kFloat16 or DType::kBFloat16.
inline uint16_t FloatToHalfFloatBits(DType dtype, float value) {
  return dtype == DType::kFloat16 ? FloatToHalf(value) : FloatToBFloat16(value);
}
inline float HalfFloatBitsToFloat(DType dtype, uint16_t bits) {
  return dtype == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
}

}  // namespace replicad

#endif  // REPLICAD_CORE_TENSOR_HALF_FLOAT_H_
