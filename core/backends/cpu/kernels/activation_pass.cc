#include "core/backends/cpu/kernels/activation_pass.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/backends/cpu/kernels/avx512.h"

namespace replicad {
namespace {

// exp(v) for v in [-87, 87]: 2^n * exp(g) with n = round(v / ln 2) and g = v
// - n ln 2 in [-ln 2 / 2, ln 2 / 2], exp(g) by its Taylor polynomial to
// degree 6 (truncation under 1.3e-7). ln 2 is split in two (Cody-Waite) so
// that n ln 2 is exact enough.
__attribute__((target("avx512f"))) __m512 Exp16(__m512 v) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 g = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), v);
  g = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), g);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// 1 / d: rcp14 refined by one Newton step (about 2^-28 relative).
__attribute__((target("avx512f"))) __m512 Reciprocal16(__m512 d) {
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

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

template <__m512 (*kFunction)(__m512)>
__attribute__((target("avx512f"))) void PassAvx512(float* data, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) _mm512_storeu_ps(data + i, kFunction(_mm512_loadu_ps(data + i)));
  if (i < count) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (count - i)) - 1);
    _mm512_mask_storeu_ps(data + i, tail, kFunction(_mm512_maskz_loadu_ps(tail, data + i)));
  }
}

void SiluPortable(float* data, size_t count) {
  for (size_t i = 0; i < count; ++i) data[i] = data[i] / (1.0f + std::exp(-data[i]));
}

void RunShare(ActivationPass pass, float* data, size_t count) {
  if (pass != ActivationPass::kSilu) return;
  if (HasAvx512()) {
    PassAvx512<Silu16>(data, count);
  } else {
    SiluPortable(data, count);
  }
}

}  // namespace

void RunActivationPass(ActivationPass pass, float* data, size_t count) {
  if (pass == ActivationPass::kNone || count == 0) return;
#pragma omp parallel if (count >= kParallelActivationFloats)
  {
    // Shares of whole vectors, so that only the last thread has a tail.
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t thread = static_cast<size_t>(omp_get_thread_num());
    const size_t vectors = (count + 15) / 16;
    const size_t begin = std::min(count, vectors * thread / threads * 16);
    const size_t end = std::min(count, vectors * (thread + 1) / threads * 16);
    if (begin < end) RunShare(pass, data + begin, end - begin);
  }
}

}  // namespace replicad
