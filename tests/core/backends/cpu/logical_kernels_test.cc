// The comparison, logic and Where kernels (and the element-wise math of
// issue #38 that no ONNX backend case covers) beyond the ONNX backend cases
// (onnx_node_conformance_test runs those): bytes of bool that are neither 0
// nor 1, as a client may send them, count as true; Where broadcasts all three
// inputs together; comparisons of the narrow integer types; Mish, Gelu and Round; integer Abs
// and Neg; a malformed node is refused naming the input and the dtypes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class LogicalKernelsTest : public CpuKernelTestBase {};

TEST_F(LogicalKernelsTest, BoolBytesOtherThanOneCountAsTrue) {
  const Tensor a = Of<uint8_t>(DType::kBool, {4}, {0, 2, 255, 1});
  const Tensor b = Of<uint8_t>(DType::kBool, {4}, {0, 1, 0, 7});
  absl::StatusOr<std::vector<Tensor>> y = Run("Equal", {a, b}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<uint8_t>((*y)[0]), ElementsAre(1, 1, 0, 1));
  y = Run("Xor", {a, b}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<uint8_t>((*y)[0]), ElementsAre(0, 0, 1, 0));
  y = Run("Not", {a}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<uint8_t>((*y)[0]), ElementsAre(1, 0, 0, 0));
}

// An attention mask as exporters write it: Where(mask == 0, -inf, scores),
// the condition [N, 1, S] against scores [N, S, S] and a scalar.
TEST_F(LogicalKernelsTest, WhereBroadcastsAllThreeInputs) {
  const Tensor condition = Of<uint8_t>(DType::kBool, {2, 1, 2}, {1, 0, 0, 3});
  const Tensor x = Of<float>(DType::kFloat32, {}, {-1e9f});
  const Tensor scores = Of<float>(DType::kFloat32, {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  absl::StatusOr<std::vector<Tensor>> y = Run("Where", {condition, x, scores}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 2, 2));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(-1e9f, 2, -1e9f, 4, 5, -1e9f, 7, -1e9f));
  // Any dtype of X and Y: int64 shape arithmetic.
  y = Run("Where", {condition, Int64s({1}, {-1}), Int64s({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
          Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(-1, 2, -1, 4, 5, -1, 7, -1));
}

TEST_F(LogicalKernelsTest, ComparisonsOfNarrowIntegers) {
  const Tensor a = Of<int8_t>(DType::kInt8, {3}, {-128, 0, 127});
  const Tensor b = Of<int8_t>(DType::kInt8, {1}, {0});
  absl::StatusOr<std::vector<Tensor>> y = Run("Less", {a, b}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<uint8_t>((*y)[0]), ElementsAre(1, 0, 0));
  const Tensor u = Of<uint8_t>(DType::kUint8, {3}, {0, 128, 255});
  const Tensor v = Of<uint8_t>(DType::kUint8, {3}, {1, 128, 254});
  y = Run("GreaterOrEqual", {u, v}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<uint8_t>((*y)[0]), ElementsAre(0, 1, 1));
  const Tensor i = Of<int32_t>(DType::kInt32, {2}, {-5, 7});
  y = Run("Add", {i, Of<int32_t>(DType::kInt32, {1}, {2147483647})}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  // int32 addition wraps, as numpy's does.
  EXPECT_THAT(Values<int32_t>((*y)[0]), ElementsAre(2147483642, -2147483642));
}

// Mish (opset 18, which the ONNX backend data here predates): x * tanh(softplus(x)), NaN kept;
// Abs and Neg of integers wrap at the minimum as numpy's do.
TEST_F(LogicalKernelsTest, MishAndIntegerSigns) {
  const Tensor x = Of<float>(DType::kFloat32, {5}, {-20.0f, -1.0f, 0.0f, 0.5f, 3.0f});
  absl::StatusOr<std::vector<Tensor>> y = Run("Mish", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  for (int i = 0; i < 5; ++i) {
    const double v = x.data<float>()[i];
    const double expected = v * std::tanh(std::log1p(std::exp(v)));
    EXPECT_NEAR((*y)[0].data<float>()[i], expected, 1e-6 + 1e-5 * std::fabs(expected)) << v;
  }
  const Tensor i8 = Of<int8_t>(DType::kInt8, {3}, {-128, -5, 7});
  y = Run("Abs", {i8}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int8_t>((*y)[0]), ElementsAre(-128, 5, 7));
  y = Run("Neg", {i8}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int8_t>((*y)[0]), ElementsAre(-128, 5, -7));
}

// Gelu (opset 20, also past this machine's backend data): 0.5 x (1 + erf(x
// / sqrt 2)), or with approximate "tanh" 0.5 x (1 + tanh(sqrt(2 / pi) (x +
// 0.044715 x^3))); within 1e-6 + 1e-5 relative. Round takes halves to even.
TEST_F(LogicalKernelsTest, GeluInBothFormsAndRoundHalfToEven) {
  const Tensor x = Of<float>(DType::kFloat32, {5}, {-4.0f, -1.0f, 0.0f, 0.7f, 3.0f});
  for (const char* approximate : {"none", "tanh"}) {
    Attributes attributes;
    attributes.Set("approximate", std::string(approximate));
    absl::StatusOr<std::vector<Tensor>> y = Run("Gelu", {x}, attributes, 20);
    ASSERT_TRUE(y.ok()) << y.status();
    for (int i = 0; i < 5; ++i) {
      const double v = x.data<float>()[i];
      const double expected =
          std::string(approximate) == "none"
              ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
              : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      EXPECT_NEAR((*y)[0].data<float>()[i], expected, 1e-6 + 1e-5 * std::fabs(expected))
          << approximate << " " << v;
    }
  }
  Attributes bad;
  bad.Set("approximate", std::string("fast"));
  EXPECT_THAT(std::string(Run("Gelu", {x}, bad, 20).status().message()),
              HasSubstr("attribute 'approximate' must be \"none\" or \"tanh\", received \"fast\""));
  absl::StatusOr<std::vector<Tensor>> y = Run(
      "Round", {Of<float>(DType::kFloat32, {5}, {0.5f, 1.5f, 2.5f, -0.5f, -1.7f})}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(0, 2, 2, 0, -2));
}

TEST_F(LogicalKernelsTest, MalformedNodesNameTheInputAndTheDtypes) {
  const Tensor f = Random({2}, 1);
  absl::StatusOr<std::vector<Tensor>> y = Run("And", {f, f}, Attributes());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(y.status().message()),
              AllOf(HasSubstr("input 0 'A' must be bool"), HasSubstr("float32[2]")));
  y = Run("Where", {f, f, f}, Attributes());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(y.status().message()), HasSubstr("input 0 'condition' must be bool"));
  y = Run("Where", {Of<uint8_t>(DType::kBool, {2}, {1, 0}), f, Int64s({2}, {1, 2})}, Attributes());
  EXPECT_THAT(std::string(y.status().message()),
              HasSubstr("input 2 'Y' must have X's dtype float32, received int64[2]"));
  y = Run("Less", {Of<uint8_t>(DType::kBool, {1}, {1}), Of<uint8_t>(DType::kBool, {1}, {1})},
          Attributes());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace replicad
