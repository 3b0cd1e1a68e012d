// ArgMax, ArgMin, Hardmax, CumSum and TopK (axis_kernels.cc) beyond the ONNX
// backend cases (onnx_node_conformance_test runs those; every CumSum case
// there is float64, which replicad does not hold): NaN wins ArgMax and ArgMin
// as numpy's does; select_last_index; CumSum's exclusive and reverse forms
// along a middle axis; TopK's ties in index order, smallest-first, and a K
// computed from the request refused as Unimplemented. Integer results are
// exact; float sums are compared within 1e-6 relative.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class AxisKernelsTest : public CpuKernelTestBase {};

TEST_F(AxisKernelsTest, ArgMaxAndArgMinTakeNanAndTheFirstOrLastTie) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows: a tie at 0 and 2; a NaN at 1; all equal.
  const Tensor x = Of<float>(DType::kFloat32, {3, 3}, {5, 1, 5, 0, nan, 9, 2, 2, 2});
  Attributes attributes;
  attributes.Set("axis", int64_t{1});
  attributes.Set("keepdims", int64_t{0});
  absl::StatusOr<std::vector<Tensor>> y = Run("ArgMax", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(3));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(0, 1, 0));
  y = Run("ArgMin", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(1, 1, 0));
  attributes.Set("select_last_index", int64_t{1});
  y = Run("ArgMax", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(2, 1, 2));
  // Integers, along axis 0 with keepdims.
  Attributes axis0;
  const Tensor i = Of<int32_t>(DType::kInt32, {2, 2}, {-3, 8, 4, 8});
  y = Run("ArgMax", {i}, axis0);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(1, 2));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(1, 0));
}

TEST_F(AxisKernelsTest, ArgMaxOfAnEmptyAxisIsRefused) {
  Attributes attributes;
  absl::StatusOr<std::vector<Tensor>> y =
      Run("ArgMax", {Tensor::Host(DType::kFloat32, {0, 3})}, attributes);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("no elements along axis 0"));
}

TEST_F(AxisKernelsTest, CumSumAlongAMiddleAxisInEveryForm) {
  // [2, 3, 2]: sums run along dim 1.
  const Tensor x =
      Of<float>(DType::kFloat32, {2, 3, 2}, {1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60});
  const Tensor axis = Int64s({}, {1});
  struct Case {
    int64_t exclusive, reverse;
    std::vector<float> expected;
  };
  const Case cases[] = {
      {0, 0, {1, 10, 3, 30, 6, 60, 4, 40, 9, 90, 15, 150}},
      {1, 0, {0, 0, 1, 10, 3, 30, 0, 0, 4, 40, 9, 90}},
      {0, 1, {6, 60, 5, 50, 3, 30, 15, 150, 11, 110, 6, 60}},
      {1, 1, {5, 50, 3, 30, 0, 0, 11, 110, 6, 60, 0, 0}},
  };
  for (const Case& c : cases) {
    Attributes attributes;
    attributes.Set("exclusive", c.exclusive);
    attributes.Set("reverse", c.reverse);
    absl::StatusOr<std::vector<Tensor>> y = Run("CumSum", {x, axis}, attributes, 17, {1});
    ASSERT_TRUE(y.ok()) << y.status();
    const std::vector<float> got = Values<float>((*y)[0]);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], c.expected[i], 1e-6 * std::fabs(c.expected[i]))
          << "exclusive " << c.exclusive << " reverse " << c.reverse << " element " << i;
    }
  }
  // int32 data, an int32 axis counted from the back.
  const Tensor ints = Of<int32_t>(DType::kInt32, {2, 2}, {1, 2, 3, 4});
  const Tensor last = Of<int32_t>(DType::kInt32, {1}, {-1});
  absl::StatusOr<std::vector<Tensor>> y = Run("CumSum", {ints, last}, Attributes(), 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int32_t>((*y)[0]), ElementsAre(1, 3, 3, 7));
}

TEST_F(AxisKernelsTest, CumSumNeedsItsAxisWhenThePlanIsMade) {
  absl::StatusOr<std::vector<Tensor>> y =
      Run("CumSum", {Random({2, 2}, 1), Int64s({}, {0})}, Attributes());
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(y.status().message(), HasSubstr("axis"));
}

TEST_F(AxisKernelsTest, TopKOrdersTiesByIndexAndTakesTheSmallest) {
  const Tensor x = Of<float>(DType::kFloat32, {2, 5}, {3, 1, 3, 7, 1, 0, -1, 5, 5, -2});
  const Tensor k = Int64s({1}, {3});
  absl::StatusOr<std::vector<Tensor>> y = Run("TopK", {x, k}, Attributes(), 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 3));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(7, 3, 3, 5, 5, 0));
  EXPECT_THAT(Values<int64_t>((*y)[1]), ElementsAre(3, 0, 2, 2, 3, 0));
  Attributes smallest;
  smallest.Set("largest", int64_t{0});
  y = Run("TopK", {x, k}, smallest, 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(1, 1, 3, -2, -1, 0));
  EXPECT_THAT(Values<int64_t>((*y)[1]), ElementsAre(1, 4, 0, 4, 1, 0));
  // Along axis 0 of int64 data.
  Attributes axis0;
  axis0.Set("axis", int64_t{0});
  y = Run("TopK", {Int64s({3, 2}, {1, 6, 5, 2, 3, 4}), Int64s({1}, {1})}, axis0, 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(5, 6));
  EXPECT_THAT(Values<int64_t>((*y)[1]), ElementsAre(1, 0));
}

// NaN is greater than every number either way, as in PyTorch's topk.
TEST_F(AxisKernelsTest, TopKPutsNanFirstAmongTheLargestAndLastAmongTheSmallest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Of<float>(DType::kFloat32, {1, 4}, {2, nan, -1, 5});
  absl::StatusOr<std::vector<Tensor>> y = Run("TopK", {x, Int64s({1}, {4})}, Attributes(), 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[1]), ElementsAre(1, 3, 0, 2));
  Attributes smallest;
  smallest.Set("largest", int64_t{0});
  y = Run("TopK", {x, Int64s({1}, {4})}, smallest, 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[1]), ElementsAre(2, 0, 3, 1));
}

TEST_F(AxisKernelsTest, TopKRefusesAKFromTheRequestOrBeyondTheAxis) {
  absl::StatusOr<std::vector<Tensor>> y =
      Run("TopK", {Random({2, 5}, 2), Int64s({1}, {2})}, Attributes());
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(y.status().message(), HasSubstr("depend on the data"));
  y = Run("TopK", {Random({2, 5}, 2), Int64s({1}, {6})}, Attributes(), 17, {1});
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("must be in [0, 5]"));
}

TEST_F(AxisKernelsTest, HardmaxMarksTheFirstGreatest) {
  const Tensor x = Of<float>(DType::kFloat32, {2, 3}, {1, 4, 4, -1, -3, -2});
  absl::StatusOr<std::vector<Tensor>> y = Run("Hardmax", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(0, 1, 0, 1, 0, 0));
}

}  // namespace
}  // namespace replicad
