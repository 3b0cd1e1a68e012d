#include "core/backends/cpu/kernels/gemv.h"

#include <omp.h>

#include <algorithm>

#include "core/backends/cpu/kernels/avx512.h"

namespace replicad {
namespace {

// Four rows at a time, so that each load of x serves four products; the
// rows are read front to back, which the hardware prefetcher follows.
__attribute__((target("avx512f"))) void RowsAvx512(const float* w, const float* x, float* y,
                                                   int64_t rows, int64_t k) {
  const int64_t whole = k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - whole)) - 1);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* w0 = w + r * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    for (int64_t i = 0; i < whole; i += 16) {
      const __m512 xv = _mm512_loadu_ps(x + i);
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + i), xv, s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + i), xv, s1);
      s2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + i), xv, s2);
      s3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + i), xv, s3);
    }
    if (tail != 0) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + whole);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + whole), xv, s0);
      s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w1 + whole), xv, s1);
      s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w2 + whole), xv, s2);
      s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w3 + whole), xv, s3);
    }
    y[r] = _mm512_reduce_add_ps(s0);
    y[r + 1] = _mm512_reduce_add_ps(s1);
    y[r + 2] = _mm512_reduce_add_ps(s2);
    y[r + 3] = _mm512_reduce_add_ps(s3);
  }
  for (; r < rows; ++r) {
    const float* row = w + r * k;
    __m512 s = _mm512_setzero_ps();
    for (int64_t i = 0; i < whole; i += 16) {
      s = _mm512_fmadd_ps(_mm512_loadu_ps(row + i), _mm512_loadu_ps(x + i), s);
    }
    if (tail != 0) {
      s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, row + whole),
                          _mm512_maskz_loadu_ps(tail, x + whole), s);
    }
    y[r] = _mm512_reduce_add_ps(s);
  }
}

// One row at a time, in four partial sums so that the multiply-adds do not
// wait on each other: each thread reads one stream. A 1280 x 1000
// classifier (5 MB, 2 threads) took 0.040 ms where four rows at a time took
// 0.053 with the weights in L3, and 0.100 against 0.158 with 64 MB written
// between calls; alexnet's 9216 x 4096 (151 MB, from DRAM) was 16-18% slower.
__attribute__((target("avx512f"))) void RowsOneStreamAvx512(const float* w, const float* x,
                                                            float* y, int64_t rows, int64_t k) {
  const int64_t whole = k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - whole)) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * k;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= whole; i += 64) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i), _mm512_loadu_ps(x + i), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i + 16), _mm512_loadu_ps(x + i + 16), s1);
      s2 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i + 32), _mm512_loadu_ps(x + i + 32), s2);
      s3 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i + 48), _mm512_loadu_ps(x + i + 48), s3);
    }
    for (; i < whole; i += 16) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i), _mm512_loadu_ps(x + i), s0);
    }
    if (tail != 0) {
      s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, row + whole),
                           _mm512_maskz_loadu_ps(tail, x + whole), s1);
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  }
}

// RowsOneStreamAvx512's loop at 8 floats a step, for CPUs without AVX-512
// (AMD before Zen 4, many cloud VMs): the portable loop's one running sum
// cannot be vectorised without reordering it, so it ran at one multiply-add
// per FMA latency: the default model's batch-1 pass (a 1568 x 128
// classifier) took 0.29-0.32 ms with it and 0.10-0.14 ms with this
// (model_forward_bench, one thread, 2-core AVX2 EPYC).
__attribute__((target("avx2,fma"))) void RowsOneStreamAvx2(const float* w, const float* x, float* y,
                                                           int64_t rows, int64_t k) {
  const int64_t whole = k / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * k;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= whole; i += 32) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(x + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i + 8), _mm256_loadu_ps(x + i + 8), s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i + 16), _mm256_loadu_ps(x + i + 16), s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    for (; i < whole; i += 8) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(x + i), s0);
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
    float total = _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
    for (; i < k; ++i) total += row[i] * x[i];
    y[r] = total;
  }
}

void RowsPortable(const float* w, const float* x, float* y, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * k;
    float sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += row[i] * x[i];
    y[r] = sum;
  }
}

}  // namespace

void GemvRows(const float* w, const float* x, float* y, int64_t rows, int64_t k) {
  if (rows <= 0) return;
  // Up to 8 MiB (2048 x 1000 floats: most torchvision classifiers, not
  // alexnet's, vgg's or efficientnet_b6/b7's) one stream per thread reads
  // fastest, from DRAM four; sysconf's cache sizes are not reliable
  // in VMs (this one's reports 320 MiB of L3 for 32), so a fixed bound.
  constexpr int64_t kCachedBytes = int64_t{8} << 20;
  const bool one_stream = rows * k * static_cast<int64_t>(sizeof(float)) <= kCachedBytes;
#pragma omp parallel
  {
    // Shares of whole groups of four rows; the last thread takes the rest.
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    const int64_t groups = (rows + 3) / 4;
    const int64_t begin = std::min(rows, groups * thread / threads * 4);
    const int64_t end = std::min(rows, groups * (thread + 1) / threads * 4);
    if (begin < end) {
      if (HasAvx512() && one_stream) {
        RowsOneStreamAvx512(w + begin * k, x, y + begin, end - begin, k);
      } else if (HasAvx512()) {
        RowsAvx512(w + begin * k, x, y + begin, end - begin, k);
      } else if (HasAvx2Fma()) {
        RowsOneStreamAvx2(w + begin * k, x, y + begin, end - begin, k);
      } else {
        RowsPortable(w + begin * k, x, y + begin, end - begin, k);
      }
    }
  }
}

}  // namespace replicad
