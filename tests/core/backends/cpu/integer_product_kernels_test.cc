// The int8 kernels (quantize_kernels.cc, integer_product_kernels.cc,
// int8_conv_kernel.cc) against sums written out here in int64: a
// QLinearConv whose weights are initializers (oneDNN's int8 convolution)
// is within 1 of the reference on every element (oneDNN scales the float
// sum in its own order, which may move a value sitting on a rounding tie),
// and the same node with its weights fed at run time (the exact int32
// kernel) equals it; MatMulInteger with per-column zero points and batch
// broadcast is exact, and so is one against int8 weights (oneDNN's int8
// matmul) with A's zero point fed at run time; QuantizeLinear saturates and sends NaN to the lowest
// value; DynamicQuantizeLinear of zeros gets scale 1; malformed nodes are
// refused naming the input.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/serve/replica.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

template <typename T>
Tensor RandomInts(DType dtype, const Shape& shape, int low, int high, uint32_t seed) {
  Tensor t = Tensor::Host(dtype, shape);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(low, high);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<T>()[i] = static_cast<T>(pick(rng));
  return t;
}

Tensor Scalar(DType dtype, double value) {
  Tensor t = Tensor::Host(dtype, {});
  switch (dtype) {
    case DType::kFloat32:
      t.data<float>()[0] = static_cast<float>(value);
      break;
    case DType::kInt8:
      t.data<int8_t>()[0] = static_cast<int8_t>(value);
      break;
    default:
      t.data<uint8_t>()[0] = static_cast<uint8_t>(value);
      break;
  }
  return t;
}

// Runs `onnx` on a CPU replica with `inputs`; the output's bytes.
std::vector<Tensor> RunModel(const std::string& onnx, const std::vector<Tensor>& inputs,
                             const std::vector<std::pair<DType, Shape>>& outputs) {
  std::unique_ptr<Replica> replica = testing::MakeCpuReplica(testing::LoadOrDie(onnx, "q"));
  std::vector<Shape> shapes;
  std::vector<const void*> in;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    in.push_back(t.raw_data());
  }
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor(shapes);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<Tensor> results;
  std::vector<void*> out;
  for (const auto& [dtype, shape] : outputs) {
    results.push_back(Tensor::Host(dtype, shape));
    out.push_back(results.back().raw_data());
  }
  if (plan.ok()) {
    const absl::Status run = (*plan)->Run(in.data(), out.data());
    EXPECT_TRUE(run.ok()) << run;
  }
  return results;
}

// One QLinearConv configuration: x [1, C, H, W] (uint8 or int8), int8
// weights with per-channel scales, an int32 bias, y of `y_type`.
struct ConvCase {
  std::string name;
  DType x_type;
  int64_t channels, filters, side, kernel, stride, pad, group;
  DType y_type;
  int32_t x_zero_point, y_zero_point;
};

class QLinearConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(QLinearConvTest, OneDnnWithinOneOfTheSumsAndExactKernelEqualsThem) {
  const ConvCase& c = GetParam();
  const int64_t out_side = (c.side + 2 * c.pad - c.kernel) / c.stride + 1;
  const Shape x_shape = {2, c.channels, c.side, c.side};
  const Shape w_shape = {c.filters, c.channels / c.group, c.kernel, c.kernel};
  const Shape y_shape = {2, c.filters, out_side, out_side};
  const Tensor x = c.x_type == DType::kInt8
                       ? RandomInts<int8_t>(DType::kInt8, x_shape, -128, 127, 1)
                       : RandomInts<uint8_t>(DType::kUint8, x_shape, 0, 255, 1);
  const Tensor w = RandomInts<int8_t>(DType::kInt8, w_shape, -127, 127, 2);
  const Tensor bias = RandomInts<int32_t>(DType::kInt32, {c.filters}, -5000, 5000, 3);
  Tensor w_scale = Tensor::Host(DType::kFloat32, {c.filters});
  for (int64_t f = 0; f < c.filters; ++f) w_scale.data<float>()[f] = 0.002f + 0.0005f * f;
  const float x_scale = 0.05f, y_scale = 0.4f;
  Tensor w_zero = Tensor::Host(DType::kInt8, {c.filters});
  for (int64_t f = 0; f < c.filters; ++f) w_zero.data<int8_t>()[f] = 0;

  // The reference: int64 sums, scaled in float as the kernels are specified to.
  std::vector<int64_t> expected(NumElements(y_shape));
  const int64_t group_in = c.channels / c.group, group_out = c.filters / c.group;
  auto x_at = [&](int64_t n, int64_t ch, int64_t h, int64_t wi) -> int64_t {
    const int64_t i = ((n * c.channels + ch) * c.side + h) * c.side + wi;
    return c.x_type == DType::kInt8 ? x.data<int8_t>()[i] : x.data<uint8_t>()[i];
  };
  const int64_t lowest = c.y_type == DType::kInt8 ? -128 : 0;
  const int64_t highest = c.y_type == DType::kInt8 ? 127 : 255;
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t f = 0; f < c.filters; ++f) {
      const int64_t g = f / group_out;
      for (int64_t oh = 0; oh < out_side; ++oh) {
        for (int64_t ow = 0; ow < out_side; ++ow) {
          int64_t sum = bias.data<int32_t>()[f];
          for (int64_t ic = 0; ic < group_in; ++ic) {
            for (int64_t kh = 0; kh < c.kernel; ++kh) {
              for (int64_t kw = 0; kw < c.kernel; ++kw) {
                const int64_t h = oh * c.stride - c.pad + kh, wi = ow * c.stride - c.pad + kw;
                if (h < 0 || h >= c.side || wi < 0 || wi >= c.side) continue;
                const int64_t weight =
                    w.data<int8_t>()[((f * group_in + ic) * c.kernel + kh) * c.kernel + kw];
                sum += (x_at(n, g * group_in + ic, h, wi) - c.x_zero_point) * weight;
              }
            }
          }
          const float multiplier = x_scale * w_scale.data<float>()[f] / y_scale;
          const int64_t q =
              static_cast<int64_t>(std::nearbyint(static_cast<float>(sum) * multiplier)) +
              c.y_zero_point;
          expected[((n * c.filters + f) * out_side + oh) * out_side + ow] =
              std::min(highest, std::max(lowest, q));
        }
      }
    }
  }

  auto model = [&](bool weights_known) {
    OnnxModelBuilder b("qconv", 13);
    b.AddInput("x", c.x_type, x_shape);
    if (weights_known) {
      b.AddInitializer("w", w);
    } else {
      b.AddInput("w", DType::kInt8, w_shape);
    }
    b.AddOutput("y", c.y_type, y_shape);
    b.AddInitializer("x_scale", Scalar(DType::kFloat32, x_scale));
    b.AddInitializer("x_zero", Scalar(c.x_type, c.x_zero_point));
    b.AddInitializer("w_scale", w_scale);
    b.AddInitializer("w_zero", w_zero);
    b.AddInitializer("y_scale", Scalar(DType::kFloat32, y_scale));
    b.AddInitializer("y_zero", Scalar(c.y_type, c.y_zero_point));
    b.AddInitializer("bias", bias);
    onnx::NodeProto* conv = b.AddNode(
        "QLinearConv",
        {"x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero", "bias"}, {"y"});
    OnnxModelBuilder::SetInts(conv, "strides", {c.stride, c.stride});
    OnnxModelBuilder::SetInts(conv, "pads", {c.pad, c.pad, c.pad, c.pad});
    OnnxModelBuilder::SetInt(conv, "group", c.group);
    return b.Serialize();
  };
  const Tensor fast = RunModel(model(true), {x}, {{c.y_type, y_shape}})[0];
  const Tensor exact = RunModel(model(false), {x, w}, {{c.y_type, y_shape}})[0];
  auto value = [&](const Tensor& t, int64_t i) -> int64_t {
    return c.y_type == DType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
  };
  int64_t off_by_one = 0, saturated = 0;
  for (int64_t i = 0; i < NumElements(y_shape); ++i) {
    ASSERT_EQ(value(exact, i), expected[i]) << "exact kernel, element " << i;
    ASSERT_LE(std::abs(value(fast, i) - expected[i]), 1) << "oneDNN kernel, element " << i;
    off_by_one += value(fast, i) != expected[i];
    saturated += expected[i] == lowest || expected[i] == highest;
  }
  // The case must exercise both ends and the middle of the range.
  EXPECT_LT(saturated, NumElements(y_shape) / 2);
  EXPECT_LE(off_by_one, NumElements(y_shape) / 100);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, QLinearConvTest,
    ::testing::Values(
        ConvCase{"Uint8Pad3x3", DType::kUint8, 16, 32, 10, 3, 1, 1, 1, DType::kUint8, 7, 120},
        ConvCase{"Int8Stride2x1x1", DType::kInt8, 32, 16, 9, 1, 2, 0, 1, DType::kInt8, -5, -3},
        ConvCase{"Int8Depthwise", DType::kInt8, 32, 32, 8, 3, 1, 1, 32, DType::kInt8, 4, 10},
        ConvCase{"Int8Grouped", DType::kInt8, 16, 16, 7, 3, 2, 1, 4, DType::kUint8, 0, 128}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

TEST(MatMulIntegerTest, PerColumnZeroPointsAndBroadcastBatchesAreExact) {
  const Shape a_shape = {2, 3, 5, 7}, b_shape = {3, 7, 4}, y_shape = {2, 3, 5, 4};
  const Tensor a = RandomInts<uint8_t>(DType::kUint8, a_shape, 0, 255, 4);
  const Tensor b = RandomInts<int8_t>(DType::kInt8, b_shape, -128, 127, 5);
  const Tensor b_zero = RandomInts<int8_t>(DType::kInt8, {4}, -20, 20, 6);
  const int32_t a_zero = 100;
  OnnxModelBuilder m("mmi", 13);
  m.AddInput("a", DType::kUint8, a_shape);
  m.AddInput("b", DType::kInt8, b_shape);
  m.AddOutput("y", DType::kInt32, y_shape);
  m.AddInitializer("a_zero", Scalar(DType::kUint8, a_zero));
  m.AddInitializer("b_zero", b_zero);
  m.AddNode("MatMulInteger", {"a", "b", "a_zero", "b_zero"}, {"y"});
  const Tensor y = RunModel(m.Serialize(), {a, b}, {{DType::kInt32, y_shape}})[0];
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t s = 0; s < 3; ++s) {
      for (int64_t i = 0; i < 5; ++i) {
        for (int64_t j = 0; j < 4; ++j) {
          int64_t sum = 0;
          for (int64_t k = 0; k < 7; ++k) {
            sum += (a.data<uint8_t>()[((n * 3 + s) * 5 + i) * 7 + k] - a_zero) *
                   (b.data<int8_t>()[(s * 7 + k) * 4 + j] - b_zero.data<int8_t>()[j]);
          }
          EXPECT_EQ(y.data<int32_t>()[((n * 3 + s) * 5 + i) * 4 + j], sum)
              << n << "," << s << "," << i << "," << j;
        }
      }
    }
  }
}

// quantize_dynamic's form: int8 weights [K, N] as an initializer (oneDNN's
// int8 matmul) and A's zero point computed by the graph (here fed).
TEST(MatMulIntegerTest, WeightsKnownAndZeroPointAtRunTimeAreExact) {
  const Shape a_shape = {2, 3, 5, 64}, y_shape = {2, 3, 5, 24};
  const Tensor a = RandomInts<uint8_t>(DType::kUint8, a_shape, 0, 255, 7);
  const Tensor b = RandomInts<int8_t>(DType::kInt8, {64, 24}, -127, 127, 8);
  OnnxModelBuilder m("mmi", 13);
  m.AddInput("a", DType::kUint8, a_shape);
  m.AddInput("a_zero", DType::kUint8, {});
  m.AddOutput("y", DType::kInt32, y_shape);
  m.AddInitializer("b", b);
  m.AddInitializer("b_zero", Scalar(DType::kInt8, 0));
  m.AddNode("MatMulInteger", {"a", "b", "a_zero", "b_zero"}, {"y"});
  for (const int zero : {0, 131}) {
    const Tensor y =
        RunModel(m.Serialize(), {a, Scalar(DType::kUint8, zero)}, {{DType::kInt32, y_shape}})[0];
    for (int64_t row = 0; row < 30; ++row) {
      for (int64_t j = 0; j < 24; ++j) {
        int64_t sum = 0;
        for (int64_t k = 0; k < 64; ++k) {
          sum += (a.data<uint8_t>()[row * 64 + k] - zero) * b.data<int8_t>()[k * 24 + j];
        }
        ASSERT_EQ(y.data<int32_t>()[row * 24 + j], sum)
            << "zero point " << zero << ", " << row << "," << j;
      }
    }
  }
}

TEST(QuantizeLinearTest, RoundsHalfToEvenSaturatesAndSendsNanToTheLowest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 1e9f, -1e9f, nan};
  // round(v / 1) + 10, int8: 0, 2, 2, -0, -2 (+10), saturated, NaN -> -128.
  const std::vector<int8_t> expected = {10, 12, 12, 10, 8, 127, -128, -128};
  Tensor x = Tensor::Host(DType::kFloat32, {8});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = values[i];
  OnnxModelBuilder m("q", 13);
  m.AddInput("x", DType::kFloat32, {8});
  m.AddOutput("y", DType::kInt8, {8});
  m.AddInitializer("scale", Scalar(DType::kFloat32, 1.0));
  m.AddInitializer("zero", Scalar(DType::kInt8, 10));
  m.AddNode("QuantizeLinear", {"x", "scale", "zero"}, {"y"});
  const Tensor y = RunModel(m.Serialize(), {x}, {{DType::kInt8, {8}}})[0];
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y.data<int8_t>()[i], expected[i]) << "value " << values[i];
}

// A node without its zero point (two inputs) quantizes to uint8 with zero
// point 0 and dequantizes with 0, run after run: the kernel reads no third
// input (in a plan the slot after the last input points at another buffer,
// here the previous run's outputs).
TEST(QuantizeLinearTest, WithoutAZeroPointTheZeroPointIsZero) {
  const std::vector<float> values = {100.0f, 0.0f, 0.26f, 1.0f, 2.5f, 12.74f, 30.0f, -3.0f};
  Tensor x = Tensor::Host(DType::kFloat32, {8});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = values[i];
  OnnxModelBuilder m("q2", 13);
  m.AddInput("x", DType::kFloat32, {8});
  m.AddOutput("q", DType::kUint8, {8});
  m.AddOutput("y", DType::kFloat32, {8});
  m.AddInitializer("scale", Scalar(DType::kFloat32, 0.5));
  m.AddNode("QuantizeLinear", {"x", "scale"}, {"q"});
  m.AddNode("DequantizeLinear", {"q", "scale"}, {"y"});
  std::unique_ptr<Replica> replica =
      testing::MakeCpuReplica(testing::LoadOrDie(m.Serialize(), "q2"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({x.shape()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor q = Tensor::Host(DType::kUint8, {8});
  Tensor y = Tensor::Host(DType::kFloat32, {8});
  const void* inputs[] = {x.raw_data()};
  void* outputs[] = {q.raw_data(), y.raw_data()};
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());
    for (int i = 0; i < 8; ++i) {
      const float quantized = std::min(std::max(std::nearbyint(values[i] / 0.5f), 0.0f), 255.0f);
      EXPECT_EQ(q.data<uint8_t>()[i], static_cast<uint8_t>(quantized))
          << "run " << run << ", " << values[i];
      EXPECT_EQ(y.data<float>()[i], quantized * 0.5f) << "run " << run << ", " << values[i];
    }
  }
}

// MatMulInteger of two inputs: zero points 0, run after run (as above).
TEST(MatMulIntegerTest, WithoutZeroPointsTheZeroPointsAreZero) {
  const Tensor a = RandomInts<uint8_t>(DType::kUint8, {3, 5}, 0, 255, 1);
  const Tensor b = RandomInts<uint8_t>(DType::kUint8, {5, 4}, 0, 255, 2);
  OnnxModelBuilder m("mm2", 13);
  m.AddInput("a", DType::kUint8, {3, 5});
  m.AddOutput("y", DType::kInt32, {3, 4});
  m.AddInitializer("b", b);
  m.AddNode("MatMulInteger", {"a", "b"}, {"y"});
  std::unique_ptr<Replica> replica =
      testing::MakeCpuReplica(testing::LoadOrDie(m.Serialize(), "mm2"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({a.shape()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor y = Tensor::Host(DType::kInt32, {3, 4});
  const void* inputs[] = {a.raw_data()};
  void* outputs[] = {y.raw_data()};
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        int32_t sum = 0;
        for (int64_t k = 0; k < 5; ++k)
          sum += a.data<uint8_t>()[i * 5 + k] * b.data<uint8_t>()[k * 4 + j];
        EXPECT_EQ(y.data<int32_t>()[i * 4 + j], sum) << "run " << run << ", " << i << "," << j;
      }
    }
  }
}

TEST(DynamicQuantizeLinearTest, ZerosGetScaleOneAndZeroPointZero) {
  Tensor x = Tensor::Host(DType::kFloat32, {4});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = 0.0f;
  OnnxModelBuilder m("dq", 13);
  m.AddInput("x", DType::kFloat32, {4});
  m.AddOutput("y", DType::kUint8, {4});
  m.AddOutput("scale", DType::kFloat32, {});
  m.AddOutput("zero", DType::kUint8, {});
  m.AddNode("DynamicQuantizeLinear", {"x"}, {"y", "scale", "zero"});
  const std::vector<Tensor> y = RunModel(
      m.Serialize(), {x}, {{DType::kUint8, {4}}, {DType::kFloat32, {}}, {DType::kUint8, {}}});
  EXPECT_EQ(y[1].data<float>()[0], 1.0f);
  EXPECT_EQ(y[2].data<uint8_t>()[0], 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[0].data<uint8_t>()[i], 0);
}

// Loading a model of one DequantizeLinear whose scale is `scale` and zero
// point `zero` (shapes; int8 x [2, 3]) fails with `code` and a message holding `says`.
void ExpectRefused(const Shape& scale, DType zero_type, const Shape& zero, absl::StatusCode code,
                   const std::string& says) {
  OnnxModelBuilder m("bad", 13);
  m.AddInput("x", DType::kInt8, {2, 3});
  m.AddOutput("y", DType::kFloat32, {2, 3});
  Tensor s = Tensor::Host(DType::kFloat32, scale);
  for (int64_t i = 0; i < s.num_elements(); ++i) s.data<float>()[i] = 1.0f;
  m.AddInitializer("scale", s);
  Tensor z = Tensor::Host(zero_type, zero);
  std::memset(z.raw_data(), 0, z.byte_size());
  m.AddInitializer("zero", z);
  m.AddNode("DequantizeLinear", {"x", "scale", "zero"}, {"y"});
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxBytes(m.Serialize(), "bad", "bad", OnnxImportOptions{});
  absl::Status status = model.status();
  if (model.ok()) {
    std::unique_ptr<Replica> replica = testing::MakeCpuReplica(*model);
    status = replica->PlanFor({{2, 3}}).status();
  }
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(says), std::string::npos) << status;
}

TEST(QuantizationRefusalTest, MalformedParametersAreNamed) {
  ExpectRefused({2}, DType::kInt8, {2}, absl::StatusCode::kInvalidArgument,
                "input 1 'x_scale' must be a scalar or [3]");
  ExpectRefused({}, DType::kUint8, {}, absl::StatusCode::kInvalidArgument,
                "input 2 'x_zero_point'");
  ExpectRefused({3}, DType::kInt8, {}, absl::StatusCode::kInvalidArgument,
                "input 2 'x_zero_point' must have its scale's 3 element(s)");
}

}  // namespace
}  // namespace replicad
