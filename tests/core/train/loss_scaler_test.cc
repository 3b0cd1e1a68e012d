// LossScaler, the fp16 loss scale between steps, against
// torch.cuda.amp.GradScaler's rules: an overflowing step halves the scale and
// restarts the count, growth_interval finite steps in a row double it, and
// the scale never reaches zero or infinity; its state (scale and the count
// towards growth, as GradScaler's state_dict) restores, and what cannot be a
// scale is refused naming the entry.

#include "core/train/loss_scaler.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

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

TEST(LossScalerTest, StateRestoresTheScaleAndTheCountTowardsGrowth) {
  LossScaler first{LossScaling{1024.0f, 3}};
  first.Update(false);  // 512.
  first.Update(true);
  first.Update(true);  // Two of three towards doubling.
  LossScaler second{LossScaling{1024.0f, 3}};
  ASSERT_TRUE(second.Restore(first.State()).ok());
  EXPECT_EQ(second.scale(), 512.0f);
  second.Update(true);
  EXPECT_EQ(second.scale(), 1024.0f) << "the third finite step in a row";

  LossScaler untouched{LossScaling{}};
  EXPECT_TRUE(untouched.Restore({}).ok()) << "a state without a loss scale";
  EXPECT_EQ(untouched.scale(), 65536.0f);
}

TEST(LossScalerTest, RestoreRefusesWhatCannotBeAScaleAndChangesNothing) {
  const auto state_with = [](Tensor scale, Tensor count) {
    return std::vector<std::pair<std::string, Tensor>>{
        {LossScaler::kScaleState, std::move(scale)},
        {LossScaler::kFiniteStepsState, std::move(count)}};
  };
  const auto scalar = [](DType dtype, double value) {
    Tensor t = Tensor::Host(dtype, {1});
    if (dtype == DType::kFloat32) t.data<float>()[0] = static_cast<float>(value);
    if (dtype == DType::kInt64) t.data<int64_t>()[0] = static_cast<int64_t>(value);
    return t;
  };
  LossScaler scaler{LossScaling{1024.0f, 3}};
  struct Case {
    std::vector<std::pair<std::string, Tensor>> state;
    std::string message;
  };
  const std::vector<Case> cases = {
      {state_with(scalar(DType::kFloat32, std::nan("")), scalar(DType::kInt64, 0)),
       "optimizer state 'replicad.loss_scale': expected a finite number > 0, received nan"},
      {state_with(scalar(DType::kFloat32, 0.0), scalar(DType::kInt64, 0)),
       "optimizer state 'replicad.loss_scale': expected a finite number > 0, received 0"},
      {state_with(scalar(DType::kFloat32, 8.0), scalar(DType::kInt64, -1)),
       "optimizer state 'replicad.loss_scale_finite_steps': expected a count >= 0, received -1"},
      {state_with(scalar(DType::kInt64, 8.0), scalar(DType::kInt64, 0)),
       "optimizer state 'replicad.loss_scale': expected a host float32 [1], received int64 [1]"},
      {state_with(Tensor::Host(DType::kFloat32, {2}), scalar(DType::kInt64, 0)),
       "optimizer state 'replicad.loss_scale': expected a host float32 [1], received float32 [2]"},
      {{{LossScaler::kScaleState, scalar(DType::kFloat32, 8.0)}},
       "optimizer state 'replicad.loss_scale_finite_steps' is missing"},
  };
  for (const Case& c : cases) {
    const absl::Status s = scaler.Restore(c.state);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(scaler.scale(), 1024.0f);
  }
}

}  // namespace
}  // namespace replicad
