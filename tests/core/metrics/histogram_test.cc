#include "core/metrics/histogram.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace metrics {
namespace {

using ::testing::ElementsAre;

TEST(HistogramTest, BucketsAreCumulativeAndUpperBoundsInclusive) {
  Histogram histogram({0.1, 0.5, 1.0});
  for (double v : {0.05, 0.1, 0.25, 0.5, 0.75, 2.0, 100.0}) histogram.Observe(v);
  const Histogram::Snapshot snapshot = histogram.Read();
  // le=0.1: 0.05, 0.1; le=0.5: +0.25, 0.5; le=1: +0.75; +Inf: +2, +100.
  EXPECT_THAT(snapshot.cumulative_counts, ElementsAre(2, 4, 5, 7));
  EXPECT_EQ(snapshot.count, 7u);
  EXPECT_DOUBLE_EQ(snapshot.sum, 0.05 + 0.1 + 0.25 + 0.5 + 0.75 + 2.0 + 100.0);
}

TEST(HistogramTest, NegativeAndInfiniteValuesLandAtTheEnds) {
  Histogram histogram({0.0, 1.0});
  histogram.Observe(-3.0);
  histogram.Observe(std::numeric_limits<double>::infinity());
  EXPECT_THAT(histogram.Read().cumulative_counts, ElementsAre(1, 1, 2));
}

TEST(HistogramTest, NanIsDropped) {
  Histogram histogram({1.0});
  histogram.Observe(0.5);
  histogram.Observe(std::nan(""));
  const Histogram::Snapshot snapshot = histogram.Read();
  EXPECT_EQ(snapshot.count, 1u);
  EXPECT_EQ(snapshot.sum, 0.5);
}

TEST(HistogramTest, WithoutBoundsOnlyTheInfBucketRemains) {
  Histogram histogram({});
  histogram.Observe(7.0);
  EXPECT_THAT(histogram.Read().cumulative_counts, ElementsAre(1));
}

TEST(HistogramTest, DefaultLatencyBucketsAreValidAndSpanHalfAMillisecondToTenSeconds) {
  const std::vector<double> bounds = DefaultLatencyBuckets();
  EXPECT_TRUE(ValidateBucketBounds(bounds).ok());
  EXPECT_EQ(bounds.front(), 0.0005);
  EXPECT_EQ(bounds.back(), 10.0);
}

TEST(HistogramTest, RejectsBadBounds) {
  EXPECT_EQ(ValidateBucketBounds({1.0, 1.0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBucketBounds({2.0, 1.0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBucketBounds({1.0, std::numeric_limits<double>::infinity()}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBucketBounds({std::nan("")}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DEATH(Histogram({3.0, 2.0}), "strictly increase");
}

}  // namespace
}  // namespace metrics
}  // namespace replicad
