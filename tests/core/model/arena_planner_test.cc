#include "core/model/arena_planner.h"

#include "gtest/gtest.h"

namespace replicad {
namespace {

bool Overlap(size_t a, size_t a_bytes, size_t b, size_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

TEST(ArenaPlannerTest, ChainReusesMemoryOfDeadValues) {
  // a -> b -> c -> d: each value lives for its producing and consuming step.
  std::vector<ArenaRequest> chain = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 3}};
  ArenaLayout layout = PlanArena(chain);
  EXPECT_EQ(layout.total_bytes, 2048u);  // Two live blocks at a time, 64-byte aligned.
  EXPECT_EQ(layout.offsets[0], layout.offsets[2]);
}

TEST(ArenaPlannerTest, LiveBlocksNeverOverlapAndOutputsNeverAliasInputs) {
  std::vector<ArenaRequest> requests;
  for (int i = 0; i < 60; ++i) {
    requests.push_back({static_cast<size_t>(64 + (i * 37) % 500), i % 20, i % 20 + (i * 7) % 9});
  }
  ArenaLayout layout = PlanArena(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(layout.offsets[i] % 64, 0u);
    EXPECT_LE(layout.offsets[i] + requests[i].bytes, layout.total_bytes);
    for (size_t j = i + 1; j < requests.size(); ++j) {
      // Lifetimes [first, last] that touch (a block born in the step
      // another dies in counts as touching) must not share bytes.
      const bool live_together = requests[i].first_step <= requests[j].last_step &&
                                 requests[j].first_step <= requests[i].last_step;
      if (live_together) {
        EXPECT_FALSE(
            Overlap(layout.offsets[i], requests[i].bytes, layout.offsets[j], requests[j].bytes))
            << i << " and " << j;
      }
    }
  }
}

TEST(ArenaPlannerTest, EmptyPlanHasNoBytes) { EXPECT_EQ(PlanArena({}).total_bytes, 0u); }

}  // namespace
}  // namespace replicad
