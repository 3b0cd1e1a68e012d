// The load-time graph optimisations against hand-computed double-precision references: folded
// Conv+BatchNormalization+Relu, Gemm+Clip, a residual Add, SiLU as Swish, HardSwish and
// HardSigmoid, a pre-activation BatchNormalization as a depthwise convolution and a Pad of nothing,
// an exported LayerNorm (Pow or Mul for the square, with and without scale and shift; left alone
// where an intermediate is a graph output) as one LayerNormalization, and a MatMul with its bias
// and an exact GELU.

#include "core/model/graph_optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/ops/fused_activation.h"
#include "core/serve/replica.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::RandomTensor;

// Runs `model` once on a CPU replica.
std::vector<Tensor> RunOnce(std::shared_ptr<const Model> model, const std::vector<Tensor>& inputs) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::unique_ptr<Replica> replica =
      *Replica::Create(model, SlotAssignment{"r0", cpu.id, 1}, CreateCpuDevice(cpu, {1}));
  std::vector<Shape> shapes;
  std::vector<const void*> in;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    in.push_back(t.raw_data());
  }
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor(shapes);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  std::vector<Tensor> outputs;
  std::vector<void*> out;
  for (const TensorType& type : (*plan)->output_types()) {
    outputs.push_back(Tensor::Host(type.dtype, type.shape));
    out.push_back(outputs.back().raw_data());
  }
  absl::Status status;
  replica->device().Enqueue([&] { status = (*plan)->Run(in.data(), out.data()); });
  EXPECT_TRUE(replica->device().Synchronize().ok());
  EXPECT_TRUE(status.ok()) << status;
  return outputs;
}

Tensor Positive(Shape shape, uint64_t seed) {
  Tensor t = RandomTensor(std::move(shape), seed);
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.data<float>()[i] = std::fabs(t.data<float>()[i]) + 0.1f;
  return t;
}

// Checks every element of y [3, 2, 2, 2] against expected(c, i), where c is
// the 1x1 convolution of x [3, 2, 2, 2] by w [2, 2, 1, 1] at row-major index i,
// computed here in double.
void ExpectOfConv1x1(const Tensor& y, const Tensor& x, const Tensor& w, double tolerance,
                     const std::function<double(double, int)>& expected) {
  for (int n = 0; n < 3; ++n) {
    for (int m = 0; m < 2; ++m) {
      for (int p = 0; p < 4; ++p) {
        double c = 0;
        for (int k = 0; k < 2; ++k)
          c += w.data<float>()[m * 2 + k] * x.data<float>()[(n * 2 + k) * 4 + p];
        const int i = (n * 2 + m) * 4 + p;
        EXPECT_NEAR(y.data<float>()[i], expected(c, i), tolerance) << "element " << i;
      }
    }
  }
}

// A 1x1 Conv, BatchNormalization and Relu become one Conv with the
// normalisation in its weights and the Relu as a post-op; the output equals
// the three computed separately (here by hand, in double).
TEST(GraphOptimizerTest, ConvBatchNormReluBecomesOneConv) {
  const Tensor w = RandomTensor({3, 2, 1, 1}, 1), b = RandomTensor({3}, 2);
  const Tensor scale = RandomTensor({3}, 3), shift = RandomTensor({3}, 4),
               mean = RandomTensor({3}, 5), var = Positive({3}, 6);
  OnnxModelBuilder builder("conv_bn_relu");
  for (auto [name, value] : std::vector<std::pair<std::string, Tensor>>{
           {"w", w}, {"b", b}, {"scale", scale}, {"shift", shift}, {"mean", mean}, {"var", var}}) {
    builder.AddInitializer(name, value);
  }
  builder.AddNode("Conv", {"x", "w", "b"}, {"c"});
  OnnxModelBuilder::SetFloat(
      builder.AddNode("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"n"}),
      "epsilon", 1e-3f);
  builder.AddNode("Relu", {"n"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 2, 3, 3});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 3, 3, 3});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");

  ASSERT_EQ(model->graph().nodes.size(), 1u);
  const Node& conv = model->graph().nodes[0];
  EXPECT_EQ(conv.op_type, "Conv");
  EXPECT_EQ(*conv.attributes.GetString(kFusedActivation, ""), "Relu");
  EXPECT_EQ(model->graph().initializers.size(), 2u);  // Folded weight and bias only.

  const Tensor x = RandomTensor({2, 2, 3, 3}, 7);
  std::vector<Tensor> y = RunOnce(model, {x});
  ASSERT_EQ(y.size(), 1u);
  for (int n = 0; n < 2; ++n) {
    for (int m = 0; m < 3; ++m) {
      for (int p = 0; p < 9; ++p) {
        double c = b.data<float>()[m];
        for (int k = 0; k < 2; ++k)
          c += w.data<float>()[m * 2 + k] * x.data<float>()[(n * 2 + k) * 9 + p];
        double normed = scale.data<float>()[m] * (c - mean.data<float>()[m]) /
                            std::sqrt(var.data<float>()[m] + 1e-3) +
                        shift.data<float>()[m];
        const double expected = std::max(0.0, normed);
        EXPECT_NEAR(y[0].data<float>()[(n * 3 + m) * 9 + p], expected, 1e-5);
      }
    }
  }
}

TEST(GraphOptimizerTest, GemmAbsorbsClipWithConstantBounds) {
  const Tensor w = RandomTensor({4, 3}, 11);
  Tensor low = Tensor::Host(DType::kFloat32, {}), high = Tensor::Host(DType::kFloat32, {});
  *low.data<float>() = -0.2f;
  *high.data<float>() = 0.3f;
  OnnxModelBuilder builder("gemm_clip");
  builder.AddInitializer("w", w);
  builder.AddInitializer("low", low);
  builder.AddInitializer("high", high);
  builder.AddNode("Gemm", {"x", "w"}, {"g"});
  builder.AddNode("Clip", {"g", "low", "high"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 3});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
  ASSERT_EQ(model->graph().nodes.size(), 1u);
  const Tensor x = RandomTensor({5, 4}, 12);
  std::vector<Tensor> y = RunOnce(model, {x});
  ASSERT_EQ(y.size(), 1u);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 3; ++c) {
      double g = 0;
      for (int k = 0; k < 4; ++k) g += x.data<float>()[r * 4 + k] * w.data<float>()[k * 3 + c];
      EXPECT_NEAR(y[0].data<float>()[r * 3 + c], std::clamp(g, -0.2, 0.3), 1e-6);
    }
  }
}

TEST(GraphOptimizerTest, IdentitiesGoExceptWhereTheyProduceAGraphOutput) {
  OnnxModelBuilder builder("identities");
  builder.AddNode("Identity", {"x"}, {"a"});
  builder.AddNode("Relu", {"a"}, {"r"});
  builder.AddNode("Identity", {"r"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 2});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
  ASSERT_EQ(model->graph().nodes.size(), 2u);
  EXPECT_EQ(model->graph().nodes[0].op_type, "Relu");
  EXPECT_EQ(model->outputs()[0].name, "y");
  Tensor x = Tensor::Host(DType::kFloat32, {1, 2});
  x.data<float>()[0] = -1;
  x.data<float>()[1] = 2;
  std::vector<Tensor> y = RunOnce(model, {x});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].data<float>()[0], 0.0f);
  EXPECT_EQ(y[0].data<float>()[1], 2.0f);
}

// Dropout with a constant bool training_mode (swin_t exports its stochastic
// depth as ratio 0 in training mode, with a mask nobody reads) is served as
// the identity, whatever the mode and ratio, as a serving system should.
TEST(GraphOptimizerTest, DropoutWithAConstantTrainingModeIsServedAsTheIdentity) {
  for (const bool training : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "training " << training);
    OnnxModelBuilder builder("dropout");
    Tensor mode = Tensor::Host(DType::kBool, {});
    mode.data<uint8_t>()[0] = training;
    Tensor ratio = Tensor::Host(DType::kFloat32, {});
    ratio.data<float>()[0] = 0.1f;
    builder.AddInitializer("ratio", ratio);
    builder.AddInitializer("mode", mode);
    builder.AddNode("Dropout", {"x", "ratio", "mode"}, {"d", "mask"});
    builder.AddNode("Relu", {"d"}, {"y"});
    builder.AddInput("x", DType::kFloat32, {kAnyDim, 2});
    builder.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
    std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
    ASSERT_EQ(model->graph().nodes.size(), 1u);
    EXPECT_EQ(model->graph().nodes[0].op_type, "Relu");
  }
}

TEST(GraphOptimizerTest, ValuesWithSeveralReadersAreNotFused) {
  OnnxModelBuilder builder("shared");
  builder.AddInitializer("w", RandomTensor({2, 2}, 1));
  builder.AddNode("Gemm", {"x", "w"}, {"g"});
  builder.AddNode("Relu", {"g"}, {"r"});
  builder.AddNode("Add", {"g", "r"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 2});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
  EXPECT_EQ(model->graph().nodes.size(), 3u);
  EXPECT_FALSE(model->graph().nodes[0].attributes.Has(kFusedActivation));
}

Tensor Scalar(float value) {
  Tensor t = Tensor::Host(DType::kFloat32, {});
  t.data<float>()[0] = value;
  return t;
}

// Layer normalization over the last dim as PyTorch exports it before opset
// 17 (ReduceMean, Sub, Pow or Mul, ReduceMean, Add, Sqrt, Div, then Mul and
// Add by the affine parameters) is one LayerNormalization, with or without
// the parameters; it stays as written where the centred value is also a
// graph output.
TEST(GraphOptimizerTest, ExportedLayerNormBecomesOneNode) {
  const Tensor gamma = RandomTensor({5}, 61), beta = RandomTensor({5}, 62);
  struct Case {
    bool square_by_mul, affine, centred_is_output;
  };
  for (const Case c : {Case{false, true, false}, Case{true, true, false}, Case{false, false, false},
                       Case{false, true, true}}) {
    OnnxModelBuilder builder("layer_norm");
    builder.AddInitializer("two", Scalar(2.0f));
    builder.AddInitializer("eps", Scalar(1e-3f));
    builder.AddInitializer("gamma", gamma);
    builder.AddInitializer("beta", beta);
    OnnxModelBuilder::SetInts(builder.AddNode("ReduceMean", {"x"}, {"m"}), "axes", {-1});
    builder.AddNode("Sub", {"x", "m"}, {"d"});
    if (c.square_by_mul) {
      builder.AddNode("Mul", {"d", "d"}, {"p"});
    } else {
      builder.AddNode("Pow", {"d", "two"}, {"p"});
    }
    OnnxModelBuilder::SetInts(builder.AddNode("ReduceMean", {"p"}, {"v"}), "axes", {-1});
    builder.AddNode("Add", {"v", "eps"}, {"ve"});
    builder.AddNode("Sqrt", {"ve"}, {"s"});
    builder.AddNode("Div", {"d", "s"}, {c.affine ? "n" : "y"});
    if (c.affine) {
      builder.AddNode("Mul", {"n", "gamma"}, {"g"});
      builder.AddNode("Add", {"beta", "g"}, {"y"});
    }
    builder.AddInput("x", DType::kFloat32, {kAnyDim, 3, 5});
    builder.AddOutput("y", DType::kFloat32, {kAnyDim, 3, 5});
    if (c.centred_is_output) builder.AddOutput("d", DType::kFloat32, {kAnyDim, 3, 5});
    std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
    if (c.centred_is_output) {
      EXPECT_EQ(model->graph().nodes.size(), 9u);
    } else {
      ASSERT_EQ(model->graph().nodes.size(), 1u);
      EXPECT_EQ(model->graph().nodes[0].op_type, "LayerNormalization");
    }

    const Tensor x = RandomTensor({2, 3, 5}, 63);
    std::vector<Tensor> y = RunOnce(model, {x});
    ASSERT_FALSE(y.empty());
    for (int row = 0; row < 6; ++row) {
      const float* v = x.data<float>() + row * 5;
      double mean = 0, var = 0;
      for (int i = 0; i < 5; ++i) mean += v[i] / 5.0;
      for (int i = 0; i < 5; ++i) var += (v[i] - mean) * (v[i] - mean) / 5.0;
      for (int i = 0; i < 5; ++i) {
        double expected = (v[i] - mean) / std::sqrt(var + 1e-3);
        if (c.affine) expected = expected * gamma.data<float>()[i] + beta.data<float>()[i];
        EXPECT_NEAR(y[0].data<float>()[row * 5 + i], expected, 1e-5) << "row " << row << " i " << i;
      }
    }
  }
}

// A linear layer as PyTorch exports it over a 3-D value (MatMul by the
// weights, Add of the bias) followed by the exact GELU (Div by sqrt(2), Erf,
// Add 1, Mul by the input, Mul by 0.5) is one MatMul with a fused bias and a
// Gelu post-op.
TEST(GraphOptimizerTest, MatMulAbsorbsItsBiasAndAnExactGelu) {
  const Tensor w = RandomTensor({4, 3}, 71), b = RandomTensor({3}, 72);
  OnnxModelBuilder builder("linear_gelu");
  builder.AddInitializer("w", w);
  builder.AddInitializer("b", b);
  builder.AddInitializer("sqrt2", Scalar(1.4142135381698608f));
  builder.AddInitializer("one", Scalar(1.0f));
  builder.AddInitializer("half", Scalar(0.5f));
  builder.AddNode("MatMul", {"x", "w"}, {"mm"});
  builder.AddNode("Add", {"b", "mm"}, {"h"});
  builder.AddNode("Div", {"h", "sqrt2"}, {"t"});
  builder.AddNode("Erf", {"t"}, {"e"});
  builder.AddNode("Add", {"e", "one"}, {"a"});
  builder.AddNode("Mul", {"h", "a"}, {"g"});
  builder.AddNode("Mul", {"g", "half"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 2, 4});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 2, 3});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
  ASSERT_EQ(model->graph().nodes.size(), 1u);
  const Node& matmul = model->graph().nodes[0];
  EXPECT_EQ(matmul.op_type, "MatMul");
  EXPECT_TRUE(HasFusedBias(matmul.attributes));
  EXPECT_EQ(*matmul.attributes.GetString(kFusedActivation, ""), "Gelu");

  const Tensor x = RandomTensor({3, 2, 4}, 73);
  std::vector<Tensor> y = RunOnce(model, {x});

  // A bias of more dims than the product ([1, 1, 3] after [2, 4] x [4, 3])
  // raises its rank: it stays an Add.
  OnnxModelBuilder raising("rank_raising_bias");
  raising.AddInitializer("w", w);
  raising.AddInitializer("b", RandomTensor({1, 1, 3}, 74));
  raising.AddNode("MatMul", {"x", "w"}, {"mm"});
  raising.AddNode("Add", {"mm", "b"}, {"y"});
  raising.AddInput("x", DType::kFloat32, {2, 4});
  raising.AddOutput("y", DType::kFloat32, {1, 2, 3});
  EXPECT_EQ(testing::LoadOrDie(raising.Serialize(), "r")->graph().nodes.size(), 2u);
  ASSERT_EQ(y.size(), 1u);
  for (int row = 0; row < 6; ++row) {
    for (int n = 0; n < 3; ++n) {
      double h = b.data<float>()[n];
      for (int k = 0; k < 4; ++k) h += x.data<float>()[row * 4 + k] * w.data<float>()[k * 3 + n];
      const double expected = 0.5 * h * (1 + std::erf(h / std::sqrt(2.0)));
      // oneDNN's gelu_erf is a polynomial erf: a few float ulps.
      EXPECT_NEAR(y[0].data<float>()[row * 3 + n], expected, 1e-5) << "row " << row << " n " << n;
    }
  }
}

// The exact GELU after a node no product precedes (here an Add of two
// inputs) becomes one Gelu node: the Add and the Gelu are left, and the
// answer is GELU's within oneDNN's polynomial erf.
TEST(GraphOptimizerTest, AnExactGeluAfterAnAddIsOneGeluNode) {
  OnnxModelBuilder builder("add_gelu");
  builder.AddInitializer("sqrt2", Scalar(1.4142135381698608f));
  builder.AddInitializer("one", Scalar(1.0f));
  builder.AddInitializer("half", Scalar(0.5f));
  builder.AddNode("Add", {"x", "z"}, {"h"});
  builder.AddNode("Div", {"h", "sqrt2"}, {"t"});
  builder.AddNode("Erf", {"t"}, {"e"});
  builder.AddNode("Add", {"e", "one"}, {"a"});
  builder.AddNode("Mul", {"h", "a"}, {"g"});
  builder.AddNode("Mul", {"g", "half"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 5});
  builder.AddInput("z", DType::kFloat32, {kAnyDim, 5});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 5});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
  ASSERT_EQ(model->graph().nodes.size(), 2u);
  EXPECT_EQ(model->graph().nodes[0].op_type, "Add");
  EXPECT_EQ(model->graph().nodes[1].op_type, "Gelu");
  const Tensor x = RandomTensor({4, 5}, 75), z = RandomTensor({4, 5}, 76);
  std::vector<Tensor> y = RunOnce(model, {x, z});
  ASSERT_EQ(y.size(), 1u);
  for (int i = 0; i < 20; ++i) {
    const double h = static_cast<double>(x.data<float>()[i] + z.data<float>()[i]);
    EXPECT_NEAR(y[0].data<float>()[i], 0.5 * h * (1 + std::erf(h / std::sqrt(2.0))), 1e-5) << i;
  }
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// A residual block's Conv -> Add -> Relu is one Conv with a sum and a Relu
// post-op; the Add's other operand may be computed after the Conv.
TEST(GraphOptimizerTest, ResidualAddAndReluFuseIntoTheConv) {
  const Tensor w = RandomTensor({2, 2, 1, 1}, 21);
  OnnxModelBuilder builder("residual");
  builder.AddInitializer("w", w);
  builder.AddNode("Conv", {"x", "w"}, {"c"});
  builder.AddNode("Sigmoid", {"x"}, {"skip"});  // Computed after the Conv.
  builder.AddNode("Add", {"skip", "c"}, {"sum"});
  builder.AddNode("Relu", {"sum"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 2, 2, 2});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 2, 2, 2});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
  ASSERT_EQ(model->graph().nodes.size(), 2u);
  EXPECT_EQ(model->graph().nodes[0].op_type, "Sigmoid");
  const Node& conv = model->graph().nodes[1];
  EXPECT_EQ(conv.op_type, "Conv");
  EXPECT_TRUE(HasFusedSum(conv.attributes));
  EXPECT_EQ(*conv.attributes.GetString(kFusedActivation, ""), "Relu");

  const Tensor x = RandomTensor({3, 2, 2, 2}, 22);
  std::vector<Tensor> y = RunOnce(model, {x});
  ASSERT_EQ(y.size(), 1u);
  ExpectOfConv1x1(y[0], x, w, 1e-5, [&](double c, int i) {
    const double skip = 1.0 / (1.0 + std::exp(-x.data<float>()[i]));
    return std::max(0.0, c + skip);
  });
}

// SiLU as PyTorch exports it (Conv -> Sigmoid, Mul of both) becomes the
// Conv's Swish post-op; it is left alone where the Sigmoid is read elsewhere.
TEST(GraphOptimizerTest, SigmoidTimesItsInputFusesAsSwish) {
  const Tensor w = RandomTensor({2, 2, 1, 1}, 31);
  for (const bool sigmoid_is_output : {false, true}) {
    OnnxModelBuilder builder("silu");
    builder.AddInitializer("w", w);
    builder.AddNode("Conv", {"x", "w"}, {"c"});
    builder.AddNode("Sigmoid", {"c"}, {"s"});
    builder.AddNode("Mul", {"s", "c"}, {"y"});
    builder.AddInput("x", DType::kFloat32, {kAnyDim, 2, 2, 2});
    builder.AddOutput("y", DType::kFloat32, {kAnyDim, 2, 2, 2});
    if (sigmoid_is_output) builder.AddOutput("s", DType::kFloat32, {kAnyDim, 2, 2, 2});
    std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
    if (sigmoid_is_output) {
      EXPECT_EQ(model->graph().nodes.size(), 3u);
      continue;
    }
    ASSERT_EQ(model->graph().nodes.size(), 1u);
    EXPECT_EQ(*model->graph().nodes[0].attributes.GetString(kFusedActivation, ""), "Swish");

    const Tensor x = RandomTensor({3, 2, 2, 2}, 32);
    std::vector<Tensor> y = RunOnce(model, {x});
    ASSERT_EQ(y.size(), 1u);
    // oneDNN's swish is within a few float ulps of the double result.
    ExpectOfConv1x1(y[0], x, w, 1e-6, [](double c, int) { return c / (1.0 + std::exp(-c)); });
  }
}

// A BatchNormalization no Conv precedes (a pre-activation) becomes a
// depthwise 1x1 Conv, and the Relu after it fuses; a Pad of nothing before
// an AveragePool goes.
TEST(GraphOptimizerTest, PreActivationBatchNormBecomesADepthwiseConvAndEmptyPadGoes) {
  const Tensor scale = RandomTensor({3}, 41), shift = RandomTensor({3}, 42),
               mean = RandomTensor({3}, 43), var = Positive({3}, 44);
  Tensor pads = Tensor::Host(DType::kInt64, {8});
  std::fill(pads.data<int64_t>(), pads.data<int64_t>() + 8, 0);
  OnnxModelBuilder builder("pre_activation");
  for (auto [name, value] : std::vector<std::pair<std::string, Tensor>>{
           {"scale", scale}, {"shift", shift}, {"mean", mean}, {"var", var}, {"pads", pads}}) {
    builder.AddInitializer(name, value);
  }
  OnnxModelBuilder::SetFloat(
      builder.AddNode("BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {"n"}),
      "epsilon", 1e-3f);
  builder.AddNode("Relu", {"n"}, {"r"});
  builder.AddNode("Pad", {"r", "pads"}, {"p"});
  OnnxModelBuilder::SetInts(builder.AddNode("AveragePool", {"p"}, {"y"}), "kernel_shape", {2, 2});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 3, 4, 4});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 3, 3, 3});
  std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");

  ASSERT_EQ(model->graph().nodes.size(), 2u);
  const Node& conv = model->graph().nodes[0];
  EXPECT_EQ(conv.op_type, "Conv");
  EXPECT_EQ(*conv.attributes.GetInt("group", 1), 3);
  EXPECT_EQ(*conv.attributes.GetString(kFusedActivation, ""), "Relu");
  EXPECT_EQ(model->graph().nodes[1].op_type, "AveragePool");

  const Tensor x = RandomTensor({2, 3, 4, 4}, 45);
  std::vector<Tensor> y = RunOnce(model, {x});
  ASSERT_EQ(y.size(), 1u);
  const auto normed = [&](int n, int c, int h, int w) {
    const double v = x.data<float>()[((n * 3 + c) * 4 + h) * 4 + w];
    return std::max(0.0, scale.data<float>()[c] * (v - mean.data<float>()[c]) /
                                 std::sqrt(var.data<float>()[c] + 1e-3) +
                             shift.data<float>()[c]);
  };
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int h = 0; h < 3; ++h) {
        for (int w = 0; w < 3; ++w) {
          const double expected = (normed(n, c, h, w) + normed(n, c, h + 1, w) +
                                   normed(n, c, h, w + 1) + normed(n, c, h + 1, w + 1)) /
                                  4;
          EXPECT_NEAR(y[0].data<float>()[((n * 3 + c) * 3 + h) * 3 + w], expected, 1e-5);
        }
      }
    }
  }
}

// Before opset 14 PyTorch writes HardSwish as y * HardSigmoid(y) with alpha
// 1/6: one fused HardSwish; a HardSigmoid alone fuses as itself.
TEST(GraphOptimizerTest, HardSigmoidFusesAndTimesItsInputIsHardSwish) {
  const Tensor w = RandomTensor({2, 2, 1, 1}, 51);
  for (const bool gated : {true, false}) {
    OnnxModelBuilder builder("hard");
    builder.AddInitializer("w", w);
    builder.AddNode("Conv", {"x", "w"}, {"c"});
    onnx::NodeProto* gate = builder.AddNode("HardSigmoid", {"c"}, {gated ? "s" : "y"});
    OnnxModelBuilder::SetFloat(gate, "alpha", gated ? 1.0f / 6 : 0.3f);
    if (gated) builder.AddNode("Mul", {"c", "s"}, {"y"});
    builder.AddInput("x", DType::kFloat32, {kAnyDim, 2, 2, 2});
    builder.AddOutput("y", DType::kFloat32, {kAnyDim, 2, 2, 2});
    std::shared_ptr<const Model> model = testing::LoadOrDie(builder.Serialize(), "m");
    ASSERT_EQ(model->graph().nodes.size(), 1u);
    EXPECT_EQ(*model->graph().nodes[0].attributes.GetString(kFusedActivation, ""),
              gated ? "HardSwish" : "HardSigmoid");

    const Tensor x = RandomTensor({3, 2, 2, 2}, 52);
    std::vector<Tensor> y = RunOnce(model, {x});
    ASSERT_EQ(y.size(), 1u);
    ExpectOfConv1x1(y[0], x, w, 1e-6, [&](double c, int) {
      return gated ? c * std::clamp(c / 6 + 0.5, 0.0, 1.0) : std::clamp(0.3 * c + 0.5, 0.0, 1.0);
    });
  }
}

}  // namespace
}  // namespace replicad
