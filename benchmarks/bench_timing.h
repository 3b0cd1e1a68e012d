#ifndef REPLICAD_BENCHMARKS_BENCH_TIMING_H_
#define REPLICAD_BENCHMARKS_BENCH_TIMING_H_

// What the command-line benchmarks share: timed passes and deterministic inputs.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/dtype.h"
#include "core/tensor/half_float.h"

namespace replicad {

struct Timing {
  std::string mode;
  double median_ms = 0;
  double mean_ms = 0;
  double min_ms = 0;
};

// Runs `pass` warmup + iterations times (the warmup ones untimed); a failing
// pass stops the run.
inline absl::StatusOr<Timing> Measure(const std::string& mode, int warmup, int iterations,
                                      const std::function<absl::Status()>& pass) {
  for (int i = 0; i < warmup; ++i) {
    if (absl::Status s = pass(); !s.ok()) return s;
  }
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = pass(); !s.ok()) return s;
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  Timing t{mode};
  if (ms.empty()) return t;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  t.median_ms = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  t.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / n;
  t.min_ms = sorted.front();
  return t;
}

// SplitMix64 floats in [-1, 1): the same bytes on every run.
inline void FillRandom(float* data, int64_t count, uint64_t seed) {
  uint64_t state = seed;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    data[i] = static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
}

// A benchmark input of any dtype: floats from FillRandom (rounded for float16 and bfloat16);
// integers in [0, 97) (valid token ids for any vocabulary of at least 97, indices for small axes);
// bools alternating. `data` holds `count` elements of `dtype`.
inline void FillInput(DType dtype, void* data, int64_t count, uint64_t seed) {
  if (dtype == DType::kFloat32) {
    FillRandom(static_cast<float*>(data), count, seed);
    return;
  }
  if (IsHalfFloatDType(dtype)) {  // FillRandom's floats, rounded to the type.
    std::vector<float> values(static_cast<size_t>(count));
    FillRandom(values.data(), count, seed);
    uint16_t* out = static_cast<uint16_t*>(data);
    for (int64_t i = 0; i < count; ++i) {
      out[i] = FloatToHalfFloatBits(dtype, values[i]);
    }
    return;
  }
  VisitDType(dtype, [&](auto traits) {
    using T = typename decltype(traits)::Type;
    T* out = static_cast<T*>(data);
    for (int64_t i = 0; i < count; ++i) {
      out[i] = static_cast<T>(dtype == DType::kBool ? i % 2 : (i * 31 + seed) % 97);
    }
  });
}

}  // namespace replicad

#endif  // REPLICAD_BENCHMARKS_BENCH_TIMING_H_
