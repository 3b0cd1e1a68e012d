#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_AVX512_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_AVX512_H_

// Internal to the CPU kernels: what the loops of our own that use AVX-512
// (activation_pass.cc, gemv.cc, attention_kernel.cc) share, the vector
// exp and reciprocal among them, and the AVX2 check of the loops
// that also have an AVX2 form. Their vector functions carry
// __attribute__((target("avx512f"))) and run only where HasAvx512() says
// so; elsewhere a portable loop does the same work. Include only from .cc
// files: it also silences a warning for the rest of the file.

#include <immintrin.h>

// GCC 12 reports the _mm512_undefined_ps() inside its own intrinsics as
// (maybe-)uninitialized, a known false positive of its headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace replicad {

// Whether this CPU runs AVX-512F instructions (asked once).
inline bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// Whether this CPU runs AVX2 instructions (asked once).
inline bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// Whether this CPU runs AVX2 and FMA instructions (asked once).
inline bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// exp(v) for v in [-87, 87]: 2^n * exp(g) with n = round(v / ln 2) and g = v
// - n ln 2 in [-ln 2 / 2, ln 2 / 2], exp(g) by its Taylor polynomial to
// degree 6 (truncation under 1.3e-7). ln 2 is split in two (Cody-Waite) so
// that n ln 2 is exact enough.
inline __attribute__((target("avx512f"))) __m512 Exp16(__m512 v) {
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
inline __attribute__((target("avx512f"))) __m512 Reciprocal16(__m512 d) {
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_AVX512_H_
