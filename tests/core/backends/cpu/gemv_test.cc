// GemvRows against a double-precision dot product, one and two threads, on
// whichever form this CPU runs. With AVX-512: weights of up to 8 MiB read a
// row at a time (64-float steps, then 16, then a tail) and of more (2100 x
// 1000 floats: four rows at a time, the row counts not a multiple of 4
// leaving a rest). With AVX2 and FMA only: every row in 32-float steps,
// then 8, then a scalar tail. K with and without each tail.

#include "core/backends/cpu/kernels/gemv.h"

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(GemvRowsTest, EveryRowIsItsDotProduct) {
  const int threads = omp_get_max_threads();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int team : {1, 2}) {
    omp_set_num_threads(team);
    for (const int64_t rows : {1, 3, 4, 9, 130, 2101}) {
      for (const int64_t k : {1, 15, 16, 70, 144, 1000}) {
        std::vector<float> w(rows * k), x(k), y(rows, NAN);
        for (float& v : w) v = dist(rng);
        for (float& v : x) v = dist(rng);
        GemvRows(w.data(), x.data(), y.data(), rows, k);
        for (int64_t r = 0; r < rows; ++r) {
          double exact = 0, size = 0;
          for (int64_t i = 0; i < k; ++i) {
            exact += static_cast<double>(w[r * k + i]) * x[i];
            size += std::fabs(static_cast<double>(w[r * k + i]) * x[i]);
          }
          // Float sums in any order: within K ulps of the sum of magnitudes.
          EXPECT_NEAR(y[r], exact, 1.2e-7 * static_cast<double>(k) * size + 1e-30)
              << "row " << r << " of " << rows << ", K " << k << ", team " << team;
        }
      }
    }
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace replicad
