#include "core/backends/cpu/kernels/activation_pass.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/backends/cpu/kernels/avx512.h"
#include "core/tensor/half_float.h"

namespace replicad {
namespace {

// x / (1 + exp(-x)), x clamped to [-87, 87] inside so that 1 + exp(-x)
// stays finite; below -87 the result is x * 0.
__attribute__((target("avx512f"))) __m512 Silu16(__m512 x) {
  const __m512 z = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(87.0f));
  __m512 r = Reciprocal16(
      _mm512_add_ps(Exp16(_mm512_sub_ps(_mm512_setzero_ps(), z)), _mm512_set1_ps(1.0f)));
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  r = _mm512_mask_blend_ps(tiny, r, _mm512_setzero_ps());
  return _mm512_mul_ps(x, r);
}

// min(max(x, low), high) with the bounds as the first operands: max and min
// return their second operand when either is NaN, so a NaN x stays NaN.
// (The broadcasts are loop-invariant once inlined into PassAvx512.)
struct Clip16 {
  float low, high;
  __attribute__((target("avx512f"))) __m512 operator()(__m512 x) const {
    return _mm512_min_ps(_mm512_set1_ps(high), _mm512_max_ps(_mm512_set1_ps(low), x));
  }
};

struct Silu16Function {
  __attribute__((target("avx512f"))) __m512 operator()(__m512 x) const { return Silu16(x); }
};

template <typename Function>
__attribute__((target("avx512f"))) void PassAvx512(const Function& f, const float* in, float* out,
                                                   size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(in + i)));
  if (i < count) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (count - i)) - 1);
    _mm512_mask_storeu_ps(out + i, tail, f(_mm512_maskz_loadu_ps(tail, in + i)));
  }
}

// As ClipScalar, 8 floats at a time: the CPUs without AVX-512 that oneDNN
// runs its AVX2 kernels on.
__attribute__((target("avx2"))) void ClipAvx2(float low, float high, const float* in, float* out,
                                              size_t count) {
  const __m256 lo = _mm256_set1_ps(low), hi = _mm256_set1_ps(high);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(in + i))));
  }
  for (; i < count; ++i) {
    const float x = in[i] < low ? low : in[i];
    out[i] = x > high ? high : x;
  }
}

// Comparisons with NaN are false, so a NaN falls through both.
void ClipScalar(float low, float high, const float* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const float x = in[i] < low ? low : in[i];
    out[i] = x > high ? high : x;
  }
}

void SiluPortable(const float* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = in[i] / (1.0f + std::exp(-in[i]));
}

void RunShare(const ActivationStep& step, const float* in, float* out, size_t count) {
  if (step.pass == ActivationPass::kSilu) {
    if (HasAvx512()) {
      PassAvx512(Silu16Function{}, in, out, count);
    } else {
      SiluPortable(in, out, count);
    }
  } else if (step.pass == ActivationPass::kClip) {
    if (HasAvx512()) {
      PassAvx512(Clip16{step.low, step.high}, in, out, count);
    } else if (HasAvx2()) {
      ClipAvx2(step.low, step.high, in, out, count);
    } else {
      ClipScalar(step.low, step.high, in, out, count);
    }
  }
}

}  // namespace

void RunActivationPass(const ActivationStep& step, const float* in, float* out, size_t count) {
  if (step.pass == ActivationPass::kNone || count == 0) {
    if (in != out) std::copy(in, in + count, out);
    return;
  }
#pragma omp parallel if (count >= kParallelActivationFloats)
  {
    // Shares of whole vectors, so that only the last thread has a tail.
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t thread = static_cast<size_t>(omp_get_thread_num());
    const size_t vectors = (count + 15) / 16;
    const size_t begin = std::min(count, vectors * thread / threads * 16);
    const size_t end = std::min(count, vectors * (thread + 1) / threads * 16);
    if (begin < end) RunShare(step, in + begin, out + begin, end - begin);
  }
}

void RunActivationPassBFloat16(const ActivationStep& step, uint16_t* data, size_t count) {
  if (step.pass == ActivationPass::kNone) return;
  // Through float32 a chunk at a time: the step in float32, rounded once.
  constexpr size_t kChunk = 256;
  float chunk[kChunk];
  for (size_t begin = 0; begin < count; begin += kChunk) {
    const size_t n = std::min(kChunk, count - begin);
    for (size_t i = 0; i < n; ++i) chunk[i] = BFloat16ToFloat(data[begin + i]);
    RunShare(step, chunk, chunk, n);
    for (size_t i = 0; i < n; ++i) data[begin + i] = FloatToBFloat16(chunk[i]);
  }
}

}  // namespace replicad
