#include "core/model/shared_plan_arena.h"

#include <memory>

#include "core/backends/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

std::unique_ptr<Device> CpuSlot() {
  return CreateCpuDevice(EnumerateCpuDevices()[0], CpuSlotOptions{1});
}

TEST(SharedPlanArenaTest, GrowsForTheLargestRunAndAllocatesNothingWhilePlansTakeTurns) {
  std::unique_ptr<Device> device = CpuSlot();
  SharedPlanArena arena(*device);
  arena.AddPlan(1000);
  arena.AddPlan(100000);
  ASSERT_TRUE(arena.Reserve(1000).ok());
  ASSERT_TRUE(arena.Reserve(100000).ok());
  EXPECT_EQ(arena.capacity(), 100000u);
  const uint64_t allocations = device->allocation_count();
  for (int turn = 0; turn < 3; ++turn) {
    ASSERT_TRUE(arena.Reserve(1000).ok());
    ASSERT_TRUE(arena.Reserve(100000).ok());
  }
  EXPECT_EQ(device->allocation_count(), allocations);
  EXPECT_EQ(arena.capacity(), 100000u);
}

TEST(SharedPlanArenaTest, ShrinksToTheLargestPlanAliveOnceTheLargerOnesAreGone) {
  std::unique_ptr<Device> device = CpuSlot();
  SharedPlanArena arena(*device);
  arena.AddPlan(1000);
  arena.AddPlan(5000);
  arena.AddPlan(1 << 20);  // One large batch's plan.
  ASSERT_TRUE(arena.Reserve(1 << 20).ok());
  arena.RemovePlan(1 << 20);  // Evicted and let go.
  ASSERT_TRUE(arena.Reserve(1000).ok());
  EXPECT_EQ(arena.capacity(), 5000u);  // The largest alive, so 5000 need not grow it.
  const uint64_t allocations = device->allocation_count();
  ASSERT_TRUE(arena.Reserve(5000).ok());
  ASSERT_TRUE(arena.Reserve(1000).ok());
  EXPECT_EQ(device->allocation_count(), allocations);

  arena.Release();  // As after warm-up.
  EXPECT_EQ(arena.capacity(), 0u);
  ASSERT_TRUE(arena.Reserve(1000).ok());
  EXPECT_EQ(arena.capacity(), 1000u);
}

}  // namespace
}  // namespace replicad
