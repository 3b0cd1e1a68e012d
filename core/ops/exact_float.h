#ifndef REPLICAD_CORE_OPS_EXACT_FLOAT_H_
#define REPLICAD_CORE_OPS_EXACT_FLOAT_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/ops/host_device.h"

// Arithmetic that the host compiler and nvcc round alike, for headers whose
// functions both the CPU kernels and our CUDA kernels call (RoiAlign's
// samples, 3-D pooling's windows, quantization, the optimizer's rules), so
// the two backends give the same bytes
// by construction. Header-only and free of CUDA headers; nvcc sees the
// functions as __host__ __device__.
//
// Each operation rounds on its own: device code spells it with a
// round-to-nearest intrinsic, which nvcc never contracts into an FMA (its
// default --fmad=true would contract a * b + c), and the host builds do not
// contract either (x86-64 without FMA flags). Pure functions; thread-safe.

namespace replicad::exact_float {

REPLICAD_HOST_DEVICE inline float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
REPLICAD_HOST_DEVICE inline float Sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
REPLICAD_HOST_DEVICE inline float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
REPLICAD_HOST_DEVICE inline float Div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
REPLICAD_HOST_DEVICE inline float Sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
// To the nearest integer, half to even (std::nearbyint in the host's default
// rounding mode).
REPLICAD_HOST_DEVICE inline float RoundHalfToEven(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return std::nearbyint(a);
#endif
}
REPLICAD_HOST_DEVICE inline double Add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
REPLICAD_HOST_DEVICE inline double Div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
REPLICAD_HOST_DEVICE inline float Ceil(float a) {
#if defined(__CUDA_ARCH__)
  return ceilf(a);
#else
  return std::ceil(a);
#endif
}

// static_cast<int64_t>(a) where that is defined (truncation toward zero),
// and INT64_MIN for NaN and values outside int64's range, as x86-64's
// conversion gives them (CUDA's would saturate, or give 0 for NaN).
REPLICAD_HOST_DEVICE inline int64_t TruncateToInt64(float a) {
  constexpr float kTwoTo63 = 9223372036854775808.0f;
  if (a >= -kTwoTo63 && a < kTwoTo63) return static_cast<int64_t>(a);
  return static_cast<int64_t>(uint64_t{1} << 63);
}

// std::max's rule on both sides: `a` unless a < b, so a NaN `b` keeps `a`,
// a NaN `a` stays, and of two zeros the first (with its sign) is kept.
REPLICAD_HOST_DEVICE inline float Max(float a, float b) { return a < b ? b : a; }

REPLICAD_HOST_DEVICE inline bool IsNaN(float a) { return a != a; }

// The bit patterns of std::numeric_limits<float>::infinity() and quiet_NaN().
REPLICAD_HOST_DEVICE inline float Infinity() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x7f800000);
#else
  return std::numeric_limits<float>::infinity();
#endif
}
REPLICAD_HOST_DEVICE inline float QuietNaN() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x7fc00000);
#else
  return std::numeric_limits<float>::quiet_NaN();
#endif
}

}  // namespace replicad::exact_float

#endif  // REPLICAD_CORE_OPS_EXACT_FLOAT_H_
