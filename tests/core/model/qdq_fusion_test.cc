// FuseQuantizedConvs (core/model/qdq_fusion.h): a QDQ convolution as
// quantize_static writes it (int8 x with a zero point, int8 weights with
// zero point 0, an int32 bias with scale x_scale * w_scale, a Relu its output
// quantization makes redundant) becomes one QLinearConv, and answers within
// one output step of the same graph left unfused (its Relu made to matter by
// an output zero point above the lowest value, so the pass leaves it alone:
// the unfused answers are the QDQ form's own float arithmetic, with the
// Relu's zeros quantized to the same values either way). A Relu that is not
// redundant, or a bias whose scale is not x_scale * w_scale, keeps the Conv.

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "core/model/onnx_builder.h"
#include "core/serve/replica.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr int64_t kChannels = 8, kFilters = 16, kSide = 6;
constexpr float kOutputStep = 0.1f;

Tensor Scalar(DType dtype, float value) {
  Tensor t = Tensor::Host(dtype, {});
  if (dtype == DType::kFloat32) t.data<float>()[0] = value;
  if (dtype == DType::kInt8) t.data<int8_t>()[0] = static_cast<int8_t>(value);
  if (dtype == DType::kInt32) t.data<int32_t>()[0] = static_cast<int32_t>(value);
  return t;
}

// x float -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> Relu -> Q(y_zero) -> DQ -> y.
std::string QdqConv(int8_t y_zero, float bias_scale_factor) {
  const float x_scale = 0.02f, w_scale = 0.01f, y_scale = kOutputStep;
  OnnxModelBuilder b("qdq", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, kChannels, kSide, kSide});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kFilters, kSide, kSide});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> weight(-127, 127), bias(-2000, 2000);
  Tensor w = Tensor::Host(DType::kInt8, {kFilters, kChannels, 3, 3});
  for (int64_t i = 0; i < w.num_elements(); ++i) w.data<int8_t>()[i] = weight(rng);
  Tensor bq = Tensor::Host(DType::kInt32, {kFilters});
  for (int64_t i = 0; i < kFilters; ++i) bq.data<int32_t>()[i] = bias(rng);
  b.AddInitializer("w", w);
  b.AddInitializer("b", bq);
  b.AddInitializer("xs", Scalar(DType::kFloat32, x_scale));
  b.AddInitializer("xz", Scalar(DType::kInt8, 3));
  b.AddInitializer("ws", Scalar(DType::kFloat32, w_scale));
  b.AddInitializer("wz", Scalar(DType::kInt8, 0));
  b.AddInitializer("bs", Scalar(DType::kFloat32, x_scale * w_scale * bias_scale_factor));
  b.AddInitializer("bz", Scalar(DType::kInt32, 0));
  b.AddInitializer("ys", Scalar(DType::kFloat32, y_scale));
  b.AddInitializer("yz", Scalar(DType::kInt8, y_zero));
  b.AddNode("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.AddNode("DequantizeLinear", {"xq", "xs", "xz"}, {"xf"});
  b.AddNode("DequantizeLinear", {"w", "ws", "wz"}, {"wf"});
  b.AddNode("DequantizeLinear", {"b", "bs", "bz"}, {"bf"});
  onnx::NodeProto* conv = b.AddNode("Conv", {"xf", "wf", "bf"}, {"c"});
  OnnxModelBuilder::SetInts(conv, "pads", {1, 1, 1, 1});
  b.AddNode("Relu", {"c"}, {"r"});
  b.AddNode("QuantizeLinear", {"r", "ys", "yz"}, {"yq"});
  b.AddNode("DequantizeLinear", {"yq", "ys", "yz"}, {"y"});
  return b.Serialize();
}

int CountOps(const Model& model, const std::string& op) {
  int count = 0;
  for (const Node& node : model.graph().nodes) count += node.op_type == op;
  return count;
}

Tensor Answer(const std::shared_ptr<const Model>& model, const Tensor& x) {
  std::unique_ptr<Replica> replica = testing::MakeCpuReplica(model);
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({x.shape()});
  EXPECT_TRUE(plan.ok()) << plan.status();
  Tensor y = Tensor::Host(DType::kFloat32, {x.shape()[0], kFilters, kSide, kSide});
  const void* inputs[] = {x.raw_data()};
  void* outputs[] = {y.raw_data()};
  EXPECT_TRUE((*plan)->Run(inputs, outputs).ok());
  return y;
}

TEST(QdqFusionTest, ConvBetweenQuantizationsBecomesOneQLinearConvWithinOneStep) {
  const std::shared_ptr<const Model> fused = testing::LoadOrDie(QdqConv(-128, 1.0f), "fused");
  EXPECT_EQ(CountOps(*fused, "QLinearConv"), 1);
  EXPECT_EQ(CountOps(*fused, "Conv"), 0);
  EXPECT_EQ(CountOps(*fused, "Relu"), 0);
  // Only the input's quantization and the output's dequantization stay.
  EXPECT_EQ(CountOps(*fused, "DequantizeLinear"), 1);
  EXPECT_EQ(CountOps(*fused, "QuantizeLinear"), 1);

  const std::shared_ptr<const Model> kept = testing::LoadOrDie(QdqConv(-127, 1.0f), "kept");
  EXPECT_EQ(CountOps(*kept, "QLinearConv"), 0);
  EXPECT_EQ(CountOps(*kept, "Conv"), 1);

  const Tensor x = testing::RandomTensor({2, kChannels, kSide, kSide}, 11);
  const Tensor a = Answer(fused, x), b = Answer(kept, x);
  // Below the top of the range both give round(max(conv, 0) / step) * step:
  // kept's zero point, one higher, only lowers its top by a step (254 steps
  // against 255), which these sums (about 60 steps' spread) hardly reach.
  const float step = kOutputStep;
  int64_t moved = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const float fa = a.data<float>()[i], fb = b.data<float>()[i];
    ASSERT_LE(std::fabs(fa - fb), step * 1.001f) << "element " << i;
    moved += std::fabs(fa - fb) > step * 0.001f;
  }
  EXPECT_LE(moved, a.num_elements() / 100);
}

TEST(QdqFusionTest, BiasOfAnotherScaleKeepsTheConv) {
  const std::shared_ptr<const Model> model = testing::LoadOrDie(QdqConv(-128, 1.5f), "m");
  EXPECT_EQ(CountOps(*model, "QLinearConv"), 0);
  EXPECT_EQ(CountOps(*model, "Conv"), 1);
}

}  // namespace
}  // namespace replicad
