// GatherElements, GatherND and OneHot (indexing_kernels.cc) beyond the ONNX
// backend cases: an index out of range from a request is InvalidArgument
// naming the value, its position and the range, with nothing written; int32
// indices; GatherND's batch_dims; OneHot's negative and out-of-range indices
// and axis. Results are exact.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class IndexingKernelsTest : public CpuKernelTestBase {};

TEST_F(IndexingKernelsTest, GatherElementsWithInt32AndNegativeIndices) {
  const Tensor data = Of<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor indices = Of<int32_t>(DType::kInt32, {2, 2}, {2, -3, 0, 1});
  Attributes attributes;
  attributes.Set("axis", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> y = Run("GatherElements", {data, indices}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(3, 1, 4, 5));
}

TEST_F(IndexingKernelsTest, AnIndexOutOfRangeFromTheRequestIsRefused) {
  const Tensor data = Of<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("GatherElements", {data, Int64s({1, 3}, {0, 2, 1})}, Attributes());
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(),
              HasSubstr("holds 2 at position 1; expected an index in [-2, 1]"));
  y = Run("GatherND", {data, Int64s({1, 2}, {1, 3})}, Attributes());
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(),
              HasSubstr("holds 3 at position 1; expected an index in [-3, 2]"));
}

TEST_F(IndexingKernelsTest, GatherNdWithBatchDims) {
  // data [2, 2, 2]; per batch, one tuple of 1 index picks a row of 2.
  const Tensor data = Of<int64_t>(DType::kInt64, {2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Attributes attributes;
  attributes.Set("batch_dims", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("GatherND", {data, Int64s({2, 1}, {1, -2})}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(2, 3, 4, 5));
  // batch_dims must leave indices a tuple dim.
  attributes.Set("batch_dims", int64_t{2});
  y = Run("GatherND", {data, Int64s({2, 1}, {1, 0})}, attributes);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("attribute 'batch_dims' must be in [0, 2)"));
}

TEST_F(IndexingKernelsTest, OneHotTakesNegativeIndicesAndIgnoresOnesOutOfRange) {
  const Tensor indices = Int64s({4}, {0, -1, 3, 7});
  const Tensor depth = Int64s({}, {3});
  const Tensor values = Of<float>(DType::kFloat32, {2}, {-1, 5});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("OneHot", {indices, depth, values}, Attributes(), 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(4, 3));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(5, -1, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1));
  // axis 0: the new dim leads; float indices are truncated.
  Attributes axis0;
  axis0.Set("axis", int64_t{0});
  y = Run("OneHot",
          {Of<float>(DType::kFloat32, {2}, {1.7f, 0.2f}), depth,
           Of<int32_t>(DType::kInt32, {2}, {0, 1})},
          axis0, 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(3, 2));
  EXPECT_THAT(Values<int32_t>((*y)[0]), ElementsAre(0, 1, 1, 0, 0, 0));
}

TEST_F(IndexingKernelsTest, OneHotNeedsAPositiveDepthKnownWhenPlanned) {
  const Tensor values = Of<float>(DType::kFloat32, {2}, {0, 1});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("OneHot", {Int64s({1}, {0}), Int64s({}, {3}), values}, Attributes());
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
  y = Run("OneHot", {Int64s({1}, {0}), Int64s({}, {0}), values}, Attributes(), 17, {1});
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("input 1 'depth' must be in [1, 2^31], received 0"));
}

}  // namespace
}  // namespace replicad
