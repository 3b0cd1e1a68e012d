// RunActivationPass against the formulas in double: the vector path's
// accuracy over the range that matters, its tail (counts that are not a
// multiple of 16), the split across threads, and the special values.

#include "core/backends/cpu/kernels/activation_pass.h"

#include <omp.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

double ExactSilu(double x) { return x / (1.0 + std::exp(-x)); }

// Every float in [-90, 90) at a step of 1/1024 (184,320: past the parallel
// threshold), then counts with a tail, on one thread and on two. (A finer
// sweep of [-20, 20) found the largest error, 3.55e-7 of the value, at
// -16.99.)
std::vector<float> Inputs(size_t count) {
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = -90.0f + static_cast<float>(i) / 1024.0f;
  return x;
}

TEST(ActivationPassTest, SiluWithinFourTenMillionthsOfTheExactValue) {
  const int threads = omp_get_max_threads();
  for (int team : {1, 2}) {
    omp_set_num_threads(team);
    for (size_t count : {size_t{184320}, size_t{1}, size_t{15}, size_t{17}, size_t{100}}) {
      const std::vector<float> x = Inputs(count);
      std::vector<float> y = x;
      RunActivationPass(ActivationPass::kSilu, y.data(), count);
      for (size_t i = 0; i < count; ++i) {
        const double exact = ExactSilu(x[i]);
        if (x[i] < -87.0f) {
          // The exact value is under 1e-35 in size there.
          EXPECT_LE(std::fabs(y[i]), 1e-35) << "x = " << x[i];
        } else {
          EXPECT_NEAR(y[i], exact, 4e-7 * std::fabs(exact) + 1e-38)
              << "x = " << x[i] << ", team " << team << ", count " << count;
        }
      }
    }
  }
  omp_set_num_threads(threads);
}

TEST(ActivationPassTest, SiluSpecialValuesAsTheFormulaGivesThem) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -0.0f, inf, -inf, std::nanf(""), 100.0f, -1e-30f};
  RunActivationPass(ActivationPass::kSilu, x.data(), x.size());
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_EQ(x[2], inf);
  EXPECT_TRUE(std::isnan(x[3])) << x[3];  // -inf / (1 + inf).
  EXPECT_TRUE(std::isnan(x[4])) << x[4];
  EXPECT_FLOAT_EQ(x[5], 100.0f);
  EXPECT_FLOAT_EQ(x[6], -0.5e-30f);  // x / 2 near 0.
}

TEST(ActivationPassTest, NoneAndEmptyLeaveTheData) {
  std::vector<float> x = {-1.0f, 2.0f};
  RunActivationPass(ActivationPass::kNone, x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{-1.0f, 2.0f}));
  RunActivationPass(ActivationPass::kSilu, nullptr, 0);
}

}  // namespace
}  // namespace replicad
