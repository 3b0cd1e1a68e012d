// LossScaler, the fp16 loss scale between steps, against
// torch.cuda.amp.GradScaler's rules: an overflowing step halves the scale and
// restarts the count, growth_interval finite steps in a row double it, and
// the scale never reaches zero or infinity.

#include "core/train/loss_scaler.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(LossScalerTest, StartsAtGradScalersDefault) {
  const LossScaler scaler{LossScaling{}};
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.overflowed_steps(), 0);
}

TEST(LossScalerTest, OverflowHalvesAndFiniteStepsInARowDouble) {
  LossScaler scaler{LossScaling{1024.0f, 3}};
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 512.0f);
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 512.0f) << "two finite steps of three";
  scaler.Update(false);  // Restarts the count.
  EXPECT_EQ(scaler.scale(), 256.0f);
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 256.0f);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 512.0f) << "three finite steps in a row";
  scaler.Update(true);
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_EQ(scaler.overflowed_steps(), 2);
}

TEST(LossScalerTest, NeverReachesZeroOrInfinity) {
  LossScaler falling{LossScaling{1.0f, 1}};
  for (int i = 0; i < 300; ++i) falling.Update(false);
  EXPECT_EQ(falling.scale(), std::numeric_limits<float>::min());
  EXPECT_EQ(falling.overflowed_steps(), 300);

  LossScaler rising{LossScaling{1.0f, 1}};
  for (int i = 0; i < 300; ++i) rising.Update(true);
  EXPECT_TRUE(std::isfinite(rising.scale()));
  EXPECT_EQ(rising.scale(), std::ldexp(1.0f, 127));
}

}  // namespace
}  // namespace replicad
