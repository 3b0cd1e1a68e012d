// PlanCache's bounds on stand-in plans (the cache never reads a plan, so a
// pointer it holds a reference to stands for one): least recently used out
// by count and by bytes, the shared arena counted once at its largest, a
// plan over the bound alone refused, and a taken-out plan put back.

#include "core/serve/plan_cache.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;

// A distinct plan pointer that nothing dereferences.
std::shared_ptr<ExecutionPlan> StandInPlan() {
  auto owner = std::make_shared<int>(0);
  return std::shared_ptr<ExecutionPlan>(owner, reinterpret_cast<ExecutionPlan*>(owner.get()));
}

PlanCache::Entry EntryFor(int64_t rows, size_t own, size_t shared = 0) {
  return PlanCache::Entry{{Shape{rows, 4}}, StandInPlan(), own, shared};
}

TEST(PlanCacheTest, TheLeastRecentlyUsedLeavesFirstByCount) {
  PlanCache cache(2, 0);
  PlanCache::Entry one = EntryFor(1, 10), two = EntryFor(2, 10);
  const auto plan_one = one.plan, plan_two = two.plan;
  EXPECT_TRUE(cache.Insert(std::move(one)).empty());
  EXPECT_FALSE(cache.TakeOldestIfFull().has_value());  // Room for one more.
  EXPECT_TRUE(cache.Insert(std::move(two)).empty());
  EXPECT_EQ(cache.Find({Shape{1, 4}}), plan_one);  // Now 2 is the least recent.
  std::optional<PlanCache::Entry> oldest = cache.TakeOldestIfFull();
  ASSERT_TRUE(oldest.has_value());
  EXPECT_EQ(oldest->plan, plan_two);
  EXPECT_EQ(cache.size(), 1u);
  cache.Restore(*std::move(oldest));  // Its replacement was not cached after all.
  EXPECT_EQ(cache.Find({Shape{2, 4}}), plan_two);
  EXPECT_EQ(cache.Find({Shape{3, 4}}), nullptr);
}

TEST(PlanCacheTest, BytesCountOwnBuffersAndTheLargestSharedArenaOnce) {
  PlanCache cache(16, 100);
  EXPECT_TRUE(cache.Insert(EntryFor(1, 10, 30)).empty());
  EXPECT_TRUE(cache.Insert(EntryFor(2, 10, 50)).empty());
  EXPECT_EQ(cache.bytes(), 10u + 10u + 50u);
  EXPECT_TRUE(cache.FitsAlone(40, 60));
  EXPECT_FALSE(cache.FitsAlone(41, 60));
  // 10 + 10 + 20 + 60 = 100 fits; 30 more own bytes take out the oldest two.
  PlanCache::Entry three = EntryFor(3, 20, 60);
  EXPECT_TRUE(cache.Insert(std::move(three)).empty());
  EXPECT_EQ(cache.bytes(), 100u);
  cache.Find({Shape{1, 4}});  // 2 is now the least recent, then 3.
  std::vector<std::shared_ptr<ExecutionPlan>> taken = cache.Insert(EntryFor(4, 30));
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_EQ(cache.Find({Shape{2, 4}}), nullptr);
  EXPECT_EQ(cache.Find({Shape{3, 4}}), nullptr);
  EXPECT_NE(cache.Find({Shape{1, 4}}), nullptr);
  EXPECT_EQ(cache.bytes(), 10u + 30u + 30u);
}

}  // namespace
}  // namespace replicad
