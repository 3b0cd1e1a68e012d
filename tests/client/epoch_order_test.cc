#include "client/epoch_order.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad::client {
namespace {

using ::testing::ElementsAre;

// The values the header promises; computed independently with a Python
// transcription of std::mt19937_64 and the loop in the header, so a change in
// either shows here.
TEST(EpochOrderTest, MatchesTheDocumentedAlgorithm) {
  EXPECT_THAT(EpochOrder(10, 0, 0), ElementsAre(7, 2, 0, 8, 3, 9, 6, 1, 5, 4));
  EXPECT_THAT(EpochOrder(10, 0, 1), ElementsAre(1, 7, 3, 9, 4, 0, 5, 2, 6, 8));
  EXPECT_THAT(EpochOrder(10, 42, 0), ElementsAre(1, 7, 9, 0, 3, 8, 4, 2, 5, 6));
  std::vector<int64_t> big = EpochOrder(60000, 0, 0);
  ASSERT_EQ(big.size(), 60000u);
  EXPECT_EQ(big[0], 50855);
  EXPECT_EQ(big[1], 30713);
  EXPECT_EQ(big[2], 21729);
  EXPECT_EQ(big[59999], 5694);
}

TEST(EpochOrderTest, IsAPermutationThatDependsOnSeedPlusEpoch) {
  std::vector<int64_t> order = EpochOrder(1000, 7, 3);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(order, identity);
  EXPECT_EQ(order, EpochOrder(1000, 7, 3));
  EXPECT_EQ(order, EpochOrder(1000, 10, 0));  // Only the sum seeds the generator.
  EXPECT_NE(order, EpochOrder(1000, 7, 4));
  // The sum wraps modulo 2^64.
  EXPECT_EQ(EpochOrder(50, UINT64_MAX, 1), EpochOrder(50, 0, 0));
}

TEST(EpochOrderTest, SmallAndEmpty) {
  EXPECT_TRUE(EpochOrder(0, 1, 0).empty());
  EXPECT_TRUE(EpochOrder(-3, 1, 0).empty());
  EXPECT_THAT(EpochOrder(1, 1, 0), ElementsAre(0));
}

}  // namespace
}  // namespace replicad::client
