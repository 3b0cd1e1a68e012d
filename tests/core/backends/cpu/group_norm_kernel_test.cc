// InstanceNormalization and GroupNormalization (group_norm_kernel.cc)
// against a double-precision reference written here (the ONNX backend data
// of this machine has no GroupNormalization case): opset 18's scale and bias
// per group, opset 21's per channel, and Instance equal to Group with one
// channel a group. Within 1e-5 + 1e-4 relative (ExpectNear).
#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

class GroupNormKernelTest : public CpuKernelTestBase {};

// y for x [N, C, spatial] in `groups` groups; scale and bias per group or
// per channel.
Tensor Reference(const Tensor& x, int64_t groups, const Tensor& scale, const Tensor& bias,
                 bool per_group, double epsilon) {
  const Shape& shape = x.shape();
  const int64_t n = shape[0], c = shape[1];
  const int64_t spatial = x.num_elements() / (n * c);
  const int64_t block = c / groups * spatial;
  Tensor y = Tensor::Host(DType::kFloat32, shape);
  for (int64_t b = 0; b < n * groups; ++b) {
    const float* in = x.data<float>() + b * block;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < block; ++i) mean += in[i];
    mean /= block;
    for (int64_t i = 0; i < block; ++i) var += (in[i] - mean) * (in[i] - mean);
    var /= block;
    for (int64_t i = 0; i < block; ++i) {
      const int64_t channel = (b % groups) * (c / groups) + i / spatial;
      const int64_t a = per_group ? b % groups : channel;
      y.data<float>()[b * block + i] =
          static_cast<float>((in[i] - mean) / std::sqrt(var + epsilon) * scale.data<float>()[a] +
                             bias.data<float>()[a]);
    }
  }
  return y;
}

TEST_F(GroupNormKernelTest, MatchesTheReferenceInBothOpsetForms) {
  const Tensor x = Random({2, 6, 3, 4}, 7);
  Attributes attributes;
  attributes.Set("num_groups", int64_t{3});
  attributes.Set("epsilon", 1e-3f);
  const Tensor group_scale = Random({3}, 8), group_bias = Random({3}, 9);
  absl::StatusOr<std::vector<Tensor>> y =
      Run("GroupNormalization", {x, group_scale, group_bias}, attributes, 18);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], Reference(x, 3, group_scale, group_bias, true, 1e-3));
  const Tensor scale = Random({6}, 10), bias = Random({6}, 11);
  y = Run("GroupNormalization", {x, scale, bias}, attributes, 21);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], Reference(x, 3, scale, bias, false, 1e-3));
  // Opset 18 asks for one scale per group.
  y = Run("GroupNormalization", {x, scale, bias}, attributes, 18);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("input 1 'scale' must be float32[3]"));
}

TEST_F(GroupNormKernelTest, InstanceNormalizationIsOneChannelAGroup) {
  const Tensor x = Random({3, 4, 5}, 12);
  const Tensor scale = Random({4}, 13), bias = Random({4}, 14);
  absl::StatusOr<std::vector<Tensor>> y =
      Run("InstanceNormalization", {x, scale, bias}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], Reference(x, 4, scale, bias, false, 1e-5));
}

TEST_F(GroupNormKernelTest, GroupsMustDivideTheChannels) {
  Attributes attributes;
  attributes.Set("num_groups", int64_t{4});
  absl::StatusOr<std::vector<Tensor>> y = Run(
      "GroupNormalization", {Random({1, 6, 2}, 1), Random({4}, 2), Random({4}, 3)}, attributes, 18);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(),
              HasSubstr("attribute 'num_groups' must divide input 0's 6 channels, received 4"));
}

}  // namespace
}  // namespace replicad
