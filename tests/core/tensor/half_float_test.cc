// float16 and bfloat16 conversions (core/tensor/half_float.h) against a
// reference written here in double arithmetic: every binary16 value both
// ways, and float32 values spread over every exponent (a stride through all
// 2^32 bit patterns) rounded to nearest even. Exact: no tolerance.

#include "core/tensor/half_float.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>

namespace replicad {
namespace {

// `value` rounded to a float type with `mantissa_bits` stored bits, smallest
// normal exponent `min_exponent` (subnormals below it) and largest finite
// value `max_finite`; rounding to nearest even as the default FP mode does.
double RoundTo(double value, int mantissa_bits, int min_exponent, double max_finite) {
  if (std::isnan(value) || std::isinf(value) || value == 0) return value;
  int exponent = 0;
  std::frexp(value, &exponent);  // value = m * 2^exponent, 0.5 <= |m| < 1.
  const int unit_exponent = std::max(exponent - 1, min_exponent) - mantissa_bits;
  const double unit = std::ldexp(1.0, unit_exponent);
  const double rounded = std::nearbyint(value / unit) * unit;
  if (std::abs(rounded) > max_finite) return std::copysign(INFINITY, value);
  return rounded;
}

constexpr double kHalfMax = 65504.0;
const double kBFloat16Max = std::ldexp(255.0 / 128.0, 127);  // 0x7f7f.

bool SameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(HalfFloatTest, EveryFloat16ConvertsToFloatAndBackUnchanged) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    const bool nan = (half & 0x7c00) == 0x7c00 && (half & 0x03ff) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(value)) << std::hex << bits;
      EXPECT_EQ(FloatToHalf(value) & 0x7c00, 0x7c00) << std::hex << bits;
      EXPECT_NE(FloatToHalf(value) & 0x03ff, 0) << std::hex << bits;
      continue;
    }
    // The value the bits encode, from the format's definition.
    const int exponent = (half >> 10) & 0x1f;
    const int mantissa = half & 0x3ff;
    double expected = exponent == 0    ? std::ldexp(mantissa, -24)
                      : exponent == 31 ? INFINITY
                                       : std::ldexp(1024 + mantissa, exponent - 25);
    if (half & 0x8000) expected = -expected;
    EXPECT_TRUE(SameFloat(value, static_cast<float>(expected))) << std::hex << bits;
    EXPECT_EQ(FloatToHalf(value), half) << std::hex << bits;
  }
}

TEST(HalfFloatTest, FloatsRoundToTheNearestFloat16TiesToEven) {
  int checked = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    const float value = FloatFromBits(static_cast<uint32_t>(bits));
    const double expected = RoundTo(value, 10, -14, kHalfMax);
    ASSERT_TRUE(SameFloat(HalfToFloat(FloatToHalf(value)), static_cast<float>(expected)))
        << std::hex << bits << " " << value;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
  // Ties: halfway between two float16 values goes to the even one.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  // The largest finite value, the first value that rounds to infinity, the
  // smallest subnormal and half of it (a tie with zero: to zero).
  EXPECT_EQ(HalfToFloat(FloatToHalf(65519.99f)), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(65520.0f))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::ldexp(1.0f, -25))), 0.0f);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(HalfFloatTest, FloatsRoundToTheNearestBFloat16TiesToEven) {
  int checked = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    const float value = FloatFromBits(static_cast<uint32_t>(bits));
    const double expected = RoundTo(value, 7, -126, kBFloat16Max);
    ASSERT_TRUE(SameFloat(BFloat16ToFloat(FloatToBFloat16(value)), static_cast<float>(expected)))
        << std::hex << bits << " " << value;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isinf(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::max()))));
  const uint16_t nan = FloatToBFloat16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(nan)));
  // A signalling NaN whose payload is all in the low 16 bits stays a NaN.
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(FloatFromBits(0x7f800001u)))));
}

TEST(HalfFloatTest, EveryBFloat16ConvertsToFloatAndBackUnchanged) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t value = static_cast<uint16_t>(bits);
    const float wide = BFloat16ToFloat(value);
    EXPECT_EQ(FloatBits(wide), bits << 16);
    if (!std::isnan(wide)) {
      EXPECT_EQ(FloatToBFloat16(wide), value) << std::hex << bits;
    }
  }
}

}  // namespace
}  // namespace replicad
