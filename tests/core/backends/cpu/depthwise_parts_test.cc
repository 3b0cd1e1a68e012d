// Where a batch-1 depthwise convolution is cut into channel parts: only where
// oneDNN's split of whole 4-block chunks leaves one thread much the busier
// and the part it saves outweighs a second primitive's call.

#include "core/backends/cpu/kernels/depthwise_parts.h"

#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

struct Expected {
  int64_t begin;
  int64_t count;
};

void ExpectParts(const std::vector<ChannelRange>& parts, const std::vector<Expected>& expected) {
  ASSERT_EQ(parts.size(), expected.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].begin, expected[i].begin) << "part " << i;
    EXPECT_EQ(parts[i].count, expected[i].count) << "part " << i;
  }
}

TEST(DepthwiseChannelPartsTest, BlocksNotInFoursAreCutIntoTheFoursAndTheRest) {
  // 5 blocks at 56 x 56: one thread had 4 of them; as 4 + 1 each has half.
  ExpectParts(DepthwiseChannelParts(72, 56, 56, 9, 2), {{0, 64}, {64, 8}});
  // 6 blocks (mobilenet_v2's 96 channels, stride 2 from 112 x 112).
  ExpectParts(DepthwiseChannelParts(96, 56, 56, 9, 2), {{0, 64}, {64, 32}});
  // 9 blocks: 4 + 2 against 2 + 1 on the two threads; also at stride 2.
  ExpectParts(DepthwiseChannelParts(144, 56, 56, 9, 2), {{0, 128}, {128, 16}});
  ExpectParts(DepthwiseChannelParts(144, 28, 28, 9, 2), {{0, 128}, {128, 16}});
}

TEST(DepthwiseChannelPartsTest, WholeWhereTheSplitIsAlreadyEven) {
  ExpectParts(DepthwiseChannelParts(64, 56, 56, 9, 2), {{0, 64}});    // One chunk.
  ExpectParts(DepthwiseChannelParts(128, 56, 56, 9, 2), {{0, 128}});  // Chunks of four.
  ExpectParts(DepthwiseChannelParts(48, 112, 112, 9, 2), {{0, 48}});  // Fewer than four blocks.
  ExpectParts(DepthwiseChannelParts(72, 56, 56, 9, 1), {{0, 72}});    // One thread.
}

TEST(DepthwiseChannelPartsTest, WholeWhereTheCutSavesLittle) {
  // 30 blocks at 14 rows: the busier thread has 16 of them against 15 when cut.
  ExpectParts(DepthwiseChannelParts(480, 14, 14, 9, 2), {{0, 480}});
  // 5 blocks of a 7 x 7 output: a quarter saved, but a few thousand multiply-adds.
  ExpectParts(DepthwiseChannelParts(80, 7, 7, 25, 2), {{0, 80}});
}

}  // namespace
}  // namespace replicad
