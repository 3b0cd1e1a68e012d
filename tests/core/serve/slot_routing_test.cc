// The speed estimate each slot learns and the routing decision made from it.
//
// The speed line each slot learns: the fit, one size class, NaN ignored, a slot that slows down.
// The routing decision: whole or split, measured shares, fixed weights, busy and unhealthy slots,
// granules, a slot kept free.
#include "core/serve/slot_routing.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

// A slot measured on 1 and 64 rows: `fixed` + `per_row` * rows seconds.
SlotSpeed Line(double fixed, double per_row) {
  SlotSpeed speed;
  for (int64_t rows : {1, 64}) speed.Record(rows, fixed + per_row * static_cast<double>(rows));
  return speed;
}

TEST(SlotSpeedTest, FitsTheLineThroughItsSizeClasses) {
  SlotSpeed speed = Line(0.002, 0.0001);
  EXPECT_NEAR(speed.fixed_seconds(), 0.002, 1e-9);
  EXPECT_NEAR(speed.seconds_per_row(), 0.0001, 1e-9);
  EXPECT_NEAR(speed.Seconds(10), 0.003, 1e-9);
  EXPECT_NEAR(speed.RowsPerSecond(10), 10 / 0.003, 1e-6);
}

TEST(SlotSpeedTest, UnmeasuredOneClassAndBadSamples) {
  SlotSpeed speed;
  EXPECT_FALSE(speed.measured());
  EXPECT_EQ(speed.Seconds(5), 0);
  speed.Record(4, 0.004);
  EXPECT_NEAR(speed.Seconds(8), 0.008, 1e-12);  // One class: proportional.
  speed.Record(4, std::nan(""));                // Ignored.
  speed.Record(0, 1.0);                         // Ignored.
  EXPECT_NEAR(speed.Seconds(8), 0.008, 1e-12);
}

TEST(SlotSpeedTest, FollowsASlotThatSlowsDown) {
  SlotSpeed speed = Line(0.001, 0.0001);
  for (int i = 0; i < 40; ++i) {
    speed.Record(1, 0.002 + 0.0003);
    speed.Record(64, 0.002 + 0.0003 * 64);
  }
  EXPECT_NEAR(speed.seconds_per_row(), 0.0003, 1e-6);
  EXPECT_NEAR(speed.fixed_seconds(), 0.002, 1e-5);
}

std::vector<SlotLoad> Loads(const std::vector<SlotSpeed>& speeds) {
  std::vector<SlotLoad> loads(speeds.size());
  for (size_t s = 0; s < speeds.size(); ++s) loads[s].speed = &speeds[s];
  return loads;
}

TEST(ChooseRouteTest, ASmallBatchOfAFixedCostModelRunsWholeOnOneSlot) {
  const std::vector<SlotSpeed> speeds = {Line(0.001, 0.00001), Line(0.001, 0.00001)};
  Route route = ChooseRoute(4, Loads(speeds), true);
  ASSERT_EQ(route.slices.size(), 1u);
  EXPECT_EQ(route.slices[0].rows(), 4);
}

TEST(ChooseRouteTest, ALargeBatchIsSplitByMeasuredSpeed) {
  // r1 is 3x slower per row.
  const std::vector<SlotSpeed> speeds = {Line(0.0001, 0.001), Line(0.0001, 0.003)};
  Route route = ChooseRoute(128, Loads(speeds), true);
  ASSERT_EQ(route.slices.size(), 2u);
  EXPECT_EQ(route.slices[0].slot, 0);
  EXPECT_EQ(route.slices[0].rows(), 96);
  EXPECT_EQ(route.slices[1].rows(), 32);
  EXPECT_NEAR(route.seconds, 0.0001 + 0.096, 1e-6);
  // Fixed weights: the operator's shares over the free slots, whatever the speeds.
  std::vector<SlotLoad> weighted = Loads(speeds);
  weighted[0].weight = 3;
  Route fixed = ChooseRoute(8, weighted, false);
  ASSERT_EQ(fixed.slices.size(), 2u);
  EXPECT_EQ(fixed.slices[0].rows(), 6);
  weighted[1].busy_seconds = 0.01;
  fixed = ChooseRoute(8, weighted, false);
  ASSERT_EQ(fixed.slices.size(), 1u);
  EXPECT_EQ(fixed.slices[0].slot, 0);
}

TEST(ChooseRouteTest, NoisyEqualSlotsGetEqualSharesAndQueuedWorkKeepsASlotFree) {
  // 4% apart: shares of 65.3/62.7 rows snap to 64/64 (granules of 8 rows).
  const std::vector<SlotSpeed> speeds = {Line(0.0001, 0.00100), Line(0.0001, 0.00104)};
  Route route = ChooseRoute(128, Loads(speeds), true);
  ASSERT_EQ(route.slices.size(), 2u);
  EXPECT_EQ(route.slices[0].rows(), 64);
  route = ChooseRoute(128, Loads(speeds), true, /*max_slots=*/1);
  ASSERT_EQ(route.slices.size(), 1u);
  EXPECT_EQ(route.slices[0].slot, 0);
}

TEST(ChooseRouteTest, ABusySlotTakesLessOrNothing) {
  const std::vector<SlotSpeed> speeds = {Line(0.0001, 0.001), Line(0.0001, 0.001)};
  std::vector<SlotLoad> loads = Loads(speeds);
  loads[0].busy_seconds = 0.032;  // Free in 32 ms.
  Route route = ChooseRoute(64, loads, true);
  ASSERT_EQ(route.slices.size(), 2u);
  // The free slot r1 comes first and takes more: both end at ~48 ms.
  EXPECT_EQ(route.slices[0].slot, 1);
  EXPECT_EQ(route.slices[0].rows(), 48);
  loads[0].busy_seconds = 1.0;
  route = ChooseRoute(64, loads, true);
  ASSERT_EQ(route.slices.size(), 1u);
  EXPECT_EQ(route.slices[0].slot, 1);
}

TEST(ChooseRouteTest, UnhealthyAndUnmeasuredSlots) {
  const std::vector<SlotSpeed> speeds = {Line(0.0001, 0.001), Line(0.0001, 0.001)};
  std::vector<SlotLoad> loads = Loads(speeds);
  loads[0].healthy = false;
  Route route = ChooseRoute(10, loads, true);
  ASSERT_EQ(route.slices.size(), 1u);
  EXPECT_EQ(route.slices[0].slot, 1);
  loads[1].healthy = false;
  EXPECT_TRUE(ChooseRoute(10, loads, true).slices.empty());
  // Nothing measured: the free slots by configured weight.
  std::vector<SlotLoad> unknown(3);
  unknown[0].weight = 3;
  unknown[2].busy_seconds = 0.5;
  route = ChooseRoute(8, unknown, true);
  ASSERT_EQ(route.slices.size(), 2u);
  EXPECT_EQ(route.slices[0].rows(), 6);
  EXPECT_EQ(route.slices[1].slot, 1);
}

TEST(ChooseRouteTest, NoSliceExceedsWhatItsSlotsMemoryHolds) {
  const std::vector<SlotSpeed> speeds = {Line(0.001, 0.0001), Line(0.001, 0.0001)};
  // Measured: an even split would give each 20; r0 holds 8.
  std::vector<SlotLoad> loads = Loads(speeds);
  loads[0].max_rows = 8;
  Route route = ChooseRoute(40, loads, true);
  int64_t covered = 0;
  for (const BatchSlice& slice : route.slices) {
    EXPECT_EQ(slice.begin, covered);
    covered = slice.end;
    if (slice.slot == 0) {
      EXPECT_LE(slice.rows(), 8);
    }
  }
  EXPECT_EQ(covered, 40);
  EXPECT_NEAR(route.seconds, 0.001 + 0.0001 * 32, 1e-9);  // r1's 32 rows end last.

  // Whole on one slot (at most one slot allowed): the rows over its memory
  // go to another healthy slot all the same.
  route = ChooseRoute(40, loads, true, /*max_slots=*/1);
  ASSERT_EQ(route.slices.size(), 2u);

  // Unmeasured (configured weights): the same cap.
  std::vector<SlotLoad> unmeasured(2);
  unmeasured[1].max_rows = 5;
  route = ChooseRoute(20, unmeasured, true);
  EXPECT_THAT(route.slices, ::testing::ElementsAre(BatchSlice{0, 0, 15}, BatchSlice{1, 15, 20}));

  // More rows than the slots hold together: left as chosen (the device fails it).
  unmeasured[0].max_rows = 4;
  route = ChooseRoute(20, unmeasured, true);
  EXPECT_THAT(route.slices, ::testing::ElementsAre(BatchSlice{0, 0, 10}, BatchSlice{1, 10, 20}));
}

}  // namespace
}  // namespace replicad
