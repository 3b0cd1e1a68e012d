// RunActivationPass against the formulas in double: the vector path's
// accuracy over the range that matters, its tail (counts that are not a
// multiple of 16), the split across threads, and the special values.
//
// SiLU within 4e-7 of the exact value over [-90, 90), tails, specials (NaN, +-inf); the clamp of
// Relu and Clip exact, NaN kept, in place or not, every tail, 1 and 2 threads; the clamp over
// bfloat16 values rounded once.

#include "core/backends/cpu/kernels/activation_pass.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "core/tensor/half_float.h"
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

// The clamp that Relu, Clip and the fused clamps run (oneDNN's makes NaN
// its lower bound): exact, NaN kept, infinities clipped; in place and not,
// every tail length, on one thread and two.
TEST(ActivationPassTest, ClipKeepsNaNAndClipsInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  const int threads = omp_get_max_threads();
  for (int team : {1, 2}) {
    omp_set_num_threads(team);
    for (size_t count :
         {size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{17}, size_t{33}, size_t{70000}}) {
      std::vector<float> x = Inputs(count);
      x[count / 2] = std::nanf("");
      if (count > 2) x[1] = inf;
      if (count > 3) x[count - 1] = -inf;
      for (const ActivationStep step : {ActivationStep{ActivationPass::kClip, 0.0f, inf},
                                        ActivationStep{ActivationPass::kClip, 0.0f, 6.0f},
                                        ActivationStep{ActivationPass::kClip, 2.0f, 1.0f}}) {
        std::vector<float> out(count), in_place = x;
        RunActivationPass(step, x.data(), out.data(), count);
        RunActivationPass(step, in_place.data(), count);
        for (size_t i = 0; i < count; ++i) {
          SCOPED_TRACE(::testing::Message() << "x = " << x[i] << ", [" << step.low << ", "
                                            << step.high << "], count " << count);
          if (std::isnan(x[i])) {
            EXPECT_TRUE(std::isnan(out[i])) << out[i];
            EXPECT_TRUE(std::isnan(in_place[i])) << in_place[i];
          } else {
            const float expected = std::min(std::max(x[i], step.low), step.high);
            EXPECT_EQ(out[i], expected);
            EXPECT_EQ(in_place[i], expected);
          }
        }
      }
    }
  }
  omp_set_num_threads(threads);
}

// The bfloat16 form (a convolution's output in a chain of bf16 convolutions):
// each value clamped and rounded to bfloat16, NaN kept, every tail.
TEST(ActivationPassTest, BFloat16ClipKeepsNaNAndRoundsOnce) {
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t count : {size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{70000}}) {
    std::vector<uint16_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = FloatToBFloat16(-90.0f + 0.37f * i);
    x[count / 2] = FloatToBFloat16(std::nanf(""));
    if (count > 2) x[1] = FloatToBFloat16(inf);
    for (const ActivationStep step : {ActivationStep{ActivationPass::kClip, 0.0f, 6.0f},
                                      ActivationStep{ActivationPass::kClip, 0.1f, inf}}) {
      std::vector<uint16_t> out = x;
      RunActivationPassBFloat16(step, out.data(), count);
      for (size_t i = 0; i < count; ++i) {
        const float in = BFloat16ToFloat(x[i]);
        SCOPED_TRACE(::testing::Message() << "x = " << in << ", count " << count);
        if (std::isnan(in)) {
          EXPECT_TRUE(std::isnan(BFloat16ToFloat(out[i])));
        } else {
          EXPECT_EQ(out[i], FloatToBFloat16(std::min(std::max(in, step.low), step.high)));
        }
      }
    }
  }
}

TEST(ActivationPassTest, NoneAndEmptyLeaveTheData) {
  std::vector<float> x = {-1.0f, 2.0f};
  RunActivationPass(ActivationPass::kNone, x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{-1.0f, 2.0f}));
  RunActivationPass(ActivationPass::kSilu, nullptr, 0);
}

}  // namespace
}  // namespace replicad
