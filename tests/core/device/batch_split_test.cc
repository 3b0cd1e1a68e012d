#include "core/device/batch_split.h"

#include <numeric>

#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(SplitBatchTest, EqualWeightsSpreadTheRemainderOverTheFirstSlots) {
  EXPECT_EQ(SplitBatch(7, {1, 1, 1}), (std::vector<BatchSlice>{{0, 0, 3}, {1, 3, 5}, {2, 5, 7}}));
  EXPECT_EQ(SplitBatch(64, {1, 1}), (std::vector<BatchSlice>{{0, 0, 32}, {1, 32, 64}}));
}

TEST(SplitBatchTest, BatchSmallerThanSlotCountUsesFewerSlots) {
  EXPECT_EQ(SplitBatch(1, {1, 1, 1}), (std::vector<BatchSlice>{{0, 0, 1}}));
  EXPECT_EQ(SplitBatch(2, {1, 1, 1}), (std::vector<BatchSlice>{{0, 0, 1}, {1, 1, 2}}));
}

TEST(SplitBatchTest, EmptyBatchHasNoSlices) { EXPECT_TRUE(SplitBatch(0, {1, 1}).empty()); }

TEST(SplitBatchTest, SharesFollowWeights) {
  EXPECT_EQ(SplitBatch(8, {3, 1}), (std::vector<BatchSlice>{{0, 0, 6}, {1, 6, 8}}));
  // 10 * 2/3 = 6.67 and 3.33: the larger remainder gets the extra row.
  EXPECT_EQ(SplitBatch(10, {2, 1}), (std::vector<BatchSlice>{{0, 0, 7}, {1, 7, 10}}));
  // A slot whose share rounds to zero is left out.
  EXPECT_EQ(SplitBatch(3, {10, 10, 1}), (std::vector<BatchSlice>{{0, 0, 2}, {1, 2, 3}}));
}

TEST(SplitBatchTest, SlicesAreContiguousAndCoverTheBatchForManyShapes) {
  for (int64_t batch = 1; batch <= 70; ++batch) {
    for (const std::vector<double>& weights :
         std::vector<std::vector<double>>{{1}, {1, 1}, {1, 2, 3}, {0.3, 0.3, 0.4, 5}}) {
      std::vector<BatchSlice> slices = SplitBatch(batch, weights);
      int64_t next = 0;
      const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
      for (const BatchSlice& s : slices) {
        EXPECT_EQ(s.begin, next);
        EXPECT_GT(s.rows(), 0);
        EXPECT_LT(std::abs(s.rows() - batch * weights[s.slot] / total), 1.0)
            << "batch " << batch << " slot " << s.slot;
        next = s.end;
      }
      EXPECT_EQ(next, batch);
    }
  }
}

}  // namespace
}  // namespace replicad
