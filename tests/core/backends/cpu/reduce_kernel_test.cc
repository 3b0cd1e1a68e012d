// The reductions of reduce_kernel.cc beyond the ONNX backend cases: each
// kind's identity over no elements (ONNX 18's rule), NaN kept by ReduceMax
// and ReduceMin, ReduceLogSumExp of values whose exp overflows float,
// noop_with_empty_axes returning the input for every kind, integer max, and
// GlobalMaxPool. Within 1e-6 relative; integers exact.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;

class ReduceKernelTest : public CpuKernelTestBase {};

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST_F(ReduceKernelTest, EachKindGivesItsIdentityOverNoElements) {
  const Tensor empty = Tensor::Host(DType::kFloat32, {2, 0});
  const Tensor axis1 = Int64s({1}, {1});
  const std::pair<std::string, float> cases[] = {
      {"ReduceMax", -kInf},      {"ReduceMin", kInf},     {"ReduceProd", 1.0f},
      {"ReduceSum", 0.0f},       {"ReduceL1", 0.0f},      {"ReduceL2", 0.0f},
      {"ReduceSumSquare", 0.0f}, {"ReduceLogSum", -kInf}, {"ReduceLogSumExp", -kInf}};
  for (const auto& [op, identity] : cases) {
    absl::StatusOr<std::vector<Tensor>> y = Run(op, {empty, axis1}, Attributes(), 18, {1});
    ASSERT_TRUE(y.ok()) << op << ": " << y.status();
    EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 1)) << op;
    EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(identity, identity)) << op;
  }
  absl::StatusOr<std::vector<Tensor>> y =
      Run("ReduceMax", {Tensor::Host(DType::kInt64, {0}), Int64s({1}, {0})}, Attributes(), 18, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(std::numeric_limits<int64_t>::lowest()));
}

TEST_F(ReduceKernelTest, MaxAndMinKeepNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Of<float>(DType::kFloat32, {2, 3}, {1, nan, 3, 4, 5, 6});
  Attributes attributes;
  attributes.Set("keepdims", int64_t{0});
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    absl::StatusOr<std::vector<Tensor>> y = Run(op, {x, Int64s({1}, {1})}, attributes, 18, {1});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(std::isnan((*y)[0].data<float>()[0])) << op;
    EXPECT_EQ((*y)[0].data<float>()[1], std::string(op) == "ReduceMax" ? 6.0f : 4.0f) << op;
  }
}

TEST_F(ReduceKernelTest, LogSumExpShiftsByTheMax) {
  // exp(1000) overflows float; log(exp(1000) + exp(1000)) = 1000 + log 2;
  // all -inf gives -inf, and a +inf among the values +inf.
  const Tensor x = Of<float>(DType::kFloat32, {3, 2}, {1000, 1000, -kInf, -kInf, kInf, 1});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("ReduceLogSumExp", {x, Int64s({1}, {1})}, Attributes(), 18, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR((*y)[0].data<float>()[0], 1000.0 + std::log(2.0), 1e-6 * 1000);
  EXPECT_EQ((*y)[0].data<float>()[1], -kInf);
  EXPECT_EQ((*y)[0].data<float>()[2], kInf);  // Not inf - inf = NaN.
}

TEST_F(ReduceKernelTest, NoopWithEmptyAxesReturnsTheInputForEveryKind) {
  const Tensor x = Of<float>(DType::kFloat32, {3}, {-2, 0.5f, 4});
  Attributes noop;
  noop.Set("noop_with_empty_axes", int64_t{1});
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd"}) {
    absl::StatusOr<std::vector<Tensor>> y = Run(op, {x, Int64s({0}, {})}, noop, 18, {1});
    ASSERT_TRUE(y.ok()) << op << ": " << y.status();
    EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(-2, 0.5f, 4)) << op;
  }
  // Without noop, empty axes reduce everything: the L2 norm of the vector.
  absl::StatusOr<std::vector<Tensor>> y = Run("ReduceL2", {x}, Attributes(), 17);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR((*y)[0].data<float>()[0], std::sqrt(4 + 0.25 + 16), 1e-6 * 5);
}

TEST_F(ReduceKernelTest, IntegerMaxAndProductAlongAnAxis) {
  const Tensor x = Of<int32_t>(DType::kInt32, {2, 3}, {1, -7, 3, 4, 5, -6});
  Attributes axis0;
  axis0.Set("axes", std::vector<int64_t>{0});
  absl::StatusOr<std::vector<Tensor>> y = Run("ReduceMax", {x}, axis0, 17);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int32_t>((*y)[0]), ElementsAre(4, 5, 3));
  y = Run("ReduceProd", {x}, axis0, 17);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int32_t>((*y)[0]), ElementsAre(4, -35, -18));
}

TEST_F(ReduceKernelTest, GlobalMaxPoolOverEverySpatialDim) {
  const Tensor x = Of<float>(DType::kFloat32, {1, 2, 2, 2}, {1, 9, -3, 2, -1, -5, -2, -4});
  absl::StatusOr<std::vector<Tensor>> y = Run("GlobalMaxPool", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(1, 2, 1, 1));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(9, -1));
}

}  // namespace
}  // namespace replicad
