#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_AVX512_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_AVX512_H_

// Internal to the CPU kernels: what the loops of our own that use AVX-512
// (activation_pass.cc, gemv.cc) share, and the AVX2 check of the loops
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

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_AVX512_H_
