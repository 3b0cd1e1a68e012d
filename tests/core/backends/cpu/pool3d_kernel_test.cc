// 3-D MaxPool and AveragePool (pool3d_kernel.cc) beyond what the ONNX backend
// cases (test_maxpool_3d_default, test_averagepool_3d_default) and the parity
// test's blocks_3d (padding, strides, ceil_mode, count_include_pad,
// against PyTorch) cover: a NaN anywhere in a window makes that output NaN
// and no other, as PyTorch's max_pool3d does; dilations, against values
// written here; malformed attributes refused naming the attribute.
#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Pool3dKernelTest : public CpuKernelTestBase {};

// X [1, 1, 2, 2, 4]: 0..15, one NaN at (1, 0, 1).
Tensor Ramp(bool with_nan) {
  std::vector<float> values(16);
  for (int i = 0; i < 16; ++i) values[i] = static_cast<float>(i);
  if (with_nan) values[9] = std::numeric_limits<float>::quiet_NaN();
  return Of<float>(DType::kFloat32, {1, 1, 2, 2, 4}, values);
}

TEST_F(Pool3dKernelTest, MaxPoolingKeepsANaNInTheWindowsThatReadIt) {
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 2, 2});
  attributes.Set("strides", std::vector<int64_t>{1, 1, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {Ramp(false)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(1, 1, 1, 1, 2));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(13, 15));
  y = Run("MaxPool", {Ramp(true)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> out = Values<float>((*y)[0]);
  EXPECT_TRUE(std::isnan(out[0]));  // Its window holds element 9.
  EXPECT_EQ(out[1], 15);
}

TEST_F(Pool3dKernelTest, DilationsAndCountedPadsMatchValuesWrittenHere) {
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{1, 1, 2});
  attributes.Set("dilations", std::vector<int64_t>{1, 1, 3});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {Ramp(false)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // Along W (4): windows {0, 3}; one output per (d, h) row.
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(3, 7, 11, 15));
  attributes.Set("dilations", std::vector<int64_t>{1, 1, 1});
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 1, 4});
  attributes.Set("pads", std::vector<int64_t>{0, 0, 1, 0, 0, 1});
  attributes.Set("count_include_pad", int64_t{1});
  y = Run("AveragePool", {Ramp(false)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // W padded to 6, windows of 4 at 0, 1, 2: sums over 8 elements (2 in D)
  // counting the pads: (0+1+2 + 8+9+10) / 8, (0+1+2+3 + 8+...+11) / 8, ...
  EXPECT_THAT(Values<float>((*y)[0]),
              ElementsAre(30.0f / 8, 44.0f / 8, 36.0f / 8, 54.0f / 8, 76.0f / 8, 60.0f / 8));
}

TEST_F(Pool3dKernelTest, MalformedAttributesAreRefusedNamingThem) {
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {Ramp(false)}, attributes);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("'kernel_shape' must hold 3 positive values"));
  attributes.Set("kernel_shape", std::vector<int64_t>{1, 1, 1});
  attributes.Set("count_include_pad", int64_t{2});
  y = Run("AveragePool", {Ramp(false)}, attributes);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("'count_include_pad' must be 0 or 1, received 2"));
}

}  // namespace
}  // namespace replicad
