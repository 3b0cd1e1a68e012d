// Shape rules of core/ops: output types for hand-computed cases the ONNX
// conformance data lacks, and the messages of malformed nodes (they must name
// the node, the input or attribute, the expected and the received value).

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/ops/op_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_test_node.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(OpRegistryTest, SupportedOpsAreSortedAndFindable) {
  const std::vector<std::string_view> ops = SupportedOps();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_EQ(std::adjacent_find(ops.begin(), ops.end()), ops.end()) << "an op is listed twice";
  for (std::string_view op : ops) {
    ASSERT_NE(FindOp(op), nullptr) << op;
    EXPECT_EQ(FindOp(op)->type, op);
  }
  EXPECT_EQ(FindOp("NoSuchOp"), nullptr);
  EXPECT_EQ(FindOp("conv"), nullptr);
}

TEST(ConvShapeTest, GroupsDilationsAndStrides) {
  // 8 channels in 2 groups; 3x3 kernel dilated by 2 spans 5; (11 + 2 - 5) / 2 + 1 = 5.
  OpTestNode node("Conv", {F32({2, 8, 11, 9}), F32({6, 4, 3, 3}), F32({6})});
  node.Set("group", int64_t{2})
      .Set("dilations", std::vector<int64_t>{2, 1})
      .Set("strides", std::vector<int64_t>{2, 2})
      .Set("pads", std::vector<int64_t>{1, 0, 1, 0});
  EXPECT_THAT(node.OutputShape(), ElementsAre(2, 6, 5, 4));
}

TEST(ConvShapeTest, SameLowerKeepsCeilOfInputOverStride) {
  OpTestNode node("Conv", {F32({1, 1, 7, 7}), F32({1, 1, 4, 4})});
  node.Set("auto_pad", std::string("SAME_LOWER")).Set("strides", std::vector<int64_t>{2, 2});
  EXPECT_THAT(node.OutputShape(), ElementsAre(1, 1, 4, 4));
}

TEST(ConvShapeTest, WeightChannelMismatchNamesNodeExpectedAndReceived) {
  OpTestNode node("Conv", {F32({1, 6, 5, 5}), F32({4, 2, 3, 3})});
  node.Set("group", int64_t{2});
  const absl::Status status = node.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("Conv node 'n1'"), HasSubstr("input 1 'W'"),
                    HasSubstr("must have 3 input channels"), HasSubstr("float32[4,2,3,3]")));
}

TEST(ConvShapeTest, BiasOfWrongLengthIsRejected) {
  OpTestNode node("Conv", {F32({1, 2, 5, 5}), F32({4, 2, 3, 3}), F32({3})});
  const absl::Status status = node.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("input 2 'B'"), HasSubstr("float32[4]"), HasSubstr("float32[3]")));
}

TEST(ConvShapeTest, KernelLargerThanPaddedInputIsRejected) {
  OpTestNode node("Conv", {F32({1, 1, 2, 2}), F32({1, 1, 3, 3})});
  EXPECT_THAT(std::string(node.Infer().message()), HasSubstr("smaller than the dilated kernel"));
}

// A 1-D Conv reaches the shape rule only as 2-D (the importer lifts it,
// one_d_windows.h); 3-D convolution and pooling are computed, pooling of
// more dims is not.
TEST(ConvShapeTest, OneDimensionalNodesAndFourDimensionalPoolingAreUnimplemented) {
  OpTestNode conv1d("Conv", {F32({1, 2, 5}), F32({4, 2, 3})});
  EXPECT_EQ(conv1d.Infer().code(), absl::StatusCode::kUnimplemented);
  OpTestNode conv3d("Conv", {F32({1, 2, 5, 6, 7}), F32({4, 2, 3, 3, 3})});
  conv3d.Set("pads", std::vector<int64_t>{1, 0, 1, 1, 0, 1});
  ASSERT_TRUE(conv3d.Infer().ok()) << conv3d.Infer();
  EXPECT_EQ(conv3d.Output().shape, (Shape{1, 4, 5, 4, 7}));
  OpTestNode bad_pads("Conv", {F32({1, 2, 5, 6, 7}), F32({4, 2, 3, 3, 3})});
  bad_pads.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  EXPECT_THAT(std::string(bad_pads.Infer().message()),
              HasSubstr("must hold 6 non-negative values [d_begin, h_begin, w_begin, d_end, h_end, "
                        "w_end]"));
  OpTestNode pool3d("MaxPool", {F32({1, 2, 5, 5, 5})});
  pool3d.Set("kernel_shape", std::vector<int64_t>{2, 2, 2}).Set("ceil_mode", int64_t{1});
  pool3d.Set("strides", std::vector<int64_t>{2, 2, 2});
  ASSERT_TRUE(pool3d.Infer().ok()) << pool3d.Infer();
  EXPECT_EQ(pool3d.Output().shape, (Shape{1, 2, 3, 3, 3}));
  OpTestNode pool4d("MaxPool", {F32({1, 2, 5, 5, 5, 5})});
  pool4d.Set("kernel_shape", std::vector<int64_t>{2, 2, 2, 2});
  EXPECT_EQ(pool4d.Infer().code(), absl::StatusCode::kUnimplemented);
}

TEST(ConvShapeTest, PadsWithAutoPadAndBadAutoPadAreRejected) {
  OpTestNode both("Conv", {F32({1, 1, 5, 5}), F32({1, 1, 3, 3})});
  both.Set("auto_pad", std::string("SAME_UPPER")).Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  EXPECT_EQ(both.Infer().code(), absl::StatusCode::kInvalidArgument);
  OpTestNode bad("Conv", {F32({1, 1, 5, 5}), F32({1, 1, 3, 3})});
  bad.Set("auto_pad", std::string("SAME"));
  EXPECT_THAT(std::string(bad.Infer().message()), HasSubstr("received 'SAME'"));
}

TEST(ConvShapeTest, Int64InputIsInvalid) {
  OpTestNode node("Conv", {I64({1, 1, 5, 5}), F32({1, 1, 3, 3})});
  const absl::Status status = node.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("must be float32, received int64[1,1,5,5]"));
}

TEST(MaxPoolShapeTest, CeilModeRoundsUp) {
  // (6 - 3) / 2 + 1 = 2.5: 2 in floor mode, 3 with ceil_mode.
  OpTestNode floor("MaxPool", {F32({1, 3, 6, 6})});
  floor.Set("kernel_shape", std::vector<int64_t>{3, 3}).Set("strides", std::vector<int64_t>{2, 2});
  EXPECT_THAT(floor.OutputShape(), ElementsAre(1, 3, 2, 2));
  OpTestNode ceil("MaxPool", {F32({1, 3, 6, 6})});
  ceil.Set("kernel_shape", std::vector<int64_t>{3, 3})
      .Set("strides", std::vector<int64_t>{2, 2})
      .Set("ceil_mode", int64_t{1});
  EXPECT_THAT(ceil.OutputShape(), ElementsAre(1, 3, 3, 3));
}

TEST(MaxPoolShapeTest, KernelShapeIsRequired) {
  OpTestNode node("MaxPool", {F32({1, 3, 6, 6})});
  EXPECT_THAT(std::string(node.Infer().message()),
              AllOf(HasSubstr("MaxPool node 'n1'"), HasSubstr("'kernel_shape' is required")));
}

TEST(GlobalAveragePoolShapeTest, KeepsRankWithUnitSpatialDims) {
  OpTestNode node("GlobalAveragePool", {F32({2, 3, 4, 5, 6})});
  EXPECT_THAT(node.OutputShape(), ElementsAre(2, 3, 1, 1, 1));
}

TEST(GemmShapeTest, TransposesAndBroadcastsC) {
  OpTestNode node("Gemm", {F32({4, 3}), F32({5, 4}), F32({3, 1})});
  node.Set("transA", int64_t{1}).Set("transB", int64_t{1});
  EXPECT_THAT(node.OutputShape(), ElementsAre(3, 5));
}

TEST(GemmShapeTest, InnerDimMismatchAndBadCAreRejected) {
  OpTestNode k("Gemm", {F32({2, 3}), F32({4, 5})});
  EXPECT_THAT(std::string(k.Infer().message()),
              AllOf(HasSubstr("Gemm node 'n1'"), HasSubstr("K = 3"), HasSubstr("float32[4,5]")));
  OpTestNode c("Gemm", {F32({2, 3}), F32({3, 5}), F32({2, 2})});
  EXPECT_THAT(std::string(c.Infer().message()),
              AllOf(HasSubstr("'C' must broadcast to [2,5]"), HasSubstr("float32[2,2]")));
}

TEST(MatMulShapeTest, NumpySemantics) {
  EXPECT_THAT(OpTestNode("MatMul", {F32({4}), F32({4})}).OutputShape(), ElementsAre());
  EXPECT_THAT(OpTestNode("MatMul", {F32({4}), F32({2, 4, 3})}).OutputShape(), ElementsAre(2, 3));
  EXPECT_THAT(OpTestNode("MatMul", {F32({2, 5, 4}), F32({4})}).OutputShape(), ElementsAre(2, 5));
  EXPECT_THAT(OpTestNode("MatMul", {F32({2, 1, 5, 4}), F32({3, 4, 6})}).OutputShape(),
              ElementsAre(2, 3, 5, 6));
}

TEST(MatMulShapeTest, MismatchesAreRejected) {
  OpTestNode k("MatMul", {F32({2, 3}), F32({4, 5})});
  EXPECT_THAT(std::string(k.Infer().message()), HasSubstr("must have 3 (A's last dim) in dim 0"));
  OpTestNode batch("MatMul", {F32({2, 3, 4}), F32({3, 4, 5})});
  EXPECT_THAT(std::string(batch.Infer().message()), HasSubstr("do not broadcast"));
  EXPECT_EQ(OpTestNode("MatMul", {I64({2, 2}), I64({2, 2})}).Infer().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(BinaryShapeTest, BroadcastsBothWays) {
  EXPECT_THAT(OpTestNode("Add", {F32({3, 1, 5}), F32({4, 1})}).OutputShape(), ElementsAre(3, 4, 5));
  EXPECT_THAT(OpTestNode("Mul", {I64({}), I64({2, 0})}).OutputShape(), ElementsAre(2, 0));
}

TEST(BinaryShapeTest, MismatchesAreRejected) {
  OpTestNode dtype("Add", {F32({2}), I64({2})});
  EXPECT_THAT(std::string(dtype.Infer().message()),
              AllOf(HasSubstr("Add node 'n1'"), HasSubstr("must have A's dtype float32"),
                    HasSubstr("int64[2]")));
  OpTestNode shape("Mul", {F32({2, 3}), F32({4})});
  EXPECT_THAT(std::string(shape.Infer().message()),
              HasSubstr("float32[2,3] and B float32[4] do not broadcast"));
}

TEST(ReluShapeTest, Int64IsValidFromOpset14ButNotComputed) {
  EXPECT_EQ(OpTestNode("Relu", {I64({3})}, 13).Infer().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpTestNode("Relu", {I64({3})}, 14).Infer().code(), absl::StatusCode::kUnimplemented);
}

TEST(FlattenShapeTest, AxisRange) {
  OpTestNode negative("Flatten", {I64({2, 3, 4})});
  negative.Set("axis", int64_t{-1});
  EXPECT_THAT(negative.OutputShape(), ElementsAre(6, 4));
  OpTestNode end("Flatten", {F32({2, 3, 4})});
  end.Set("axis", int64_t{3});
  EXPECT_THAT(end.OutputShape(), ElementsAre(24, 1));
  OpTestNode bad("Flatten", {F32({2, 3, 4})});
  bad.Set("axis", int64_t{4});
  EXPECT_THAT(std::string(bad.Infer().message()),
              AllOf(HasSubstr("'axis' must be in [-3, 3]"), HasSubstr("received 4")));
}

TEST(ReshapeShapeTest, ZeroCopiesUnlessAllowzero) {
  OpTestNode copy("Reshape", {F32({2, 3, 4}), I64({3})});
  copy.Constant(1, {0, -1, 2});
  EXPECT_THAT(copy.OutputShape(), ElementsAre(2, 6, 2));
  OpTestNode allow("Reshape", {F32({0, 3}), I64({2})});
  allow.Set("allowzero", int64_t{1}).Constant(1, {3, 0});
  EXPECT_THAT(allow.OutputShape(), ElementsAre(3, 0));
  // Before opset 14 there is no allowzero: a 0 always copies.
  OpTestNode old("Reshape", {F32({2, 3}), I64({2})}, 13);
  old.Set("allowzero", int64_t{1}).Constant(1, {0, 3});
  EXPECT_THAT(old.OutputShape(), ElementsAre(2, 3));
}

TEST(ReshapeShapeTest, MalformedShapesAreRejected) {
  OpTestNode two("Reshape", {F32({2, 3}), I64({2})});
  two.Constant(1, {-1, -1});
  EXPECT_THAT(std::string(two.Infer().message()), HasSubstr("more than one -1"));
  OpTestNode count("Reshape", {F32({2, 3}), I64({2})});
  count.Constant(1, {4, 2});
  EXPECT_THAT(
      std::string(count.Infer().message()),
      AllOf(HasSubstr("Reshape node 'n1'"), HasSubstr("[4,2]"), HasSubstr("float32[2,3] has 6")));
  OpTestNode both("Reshape", {F32({0, 3}), I64({2})});
  both.Set("allowzero", int64_t{1}).Constant(1, {0, -1});
  EXPECT_THAT(std::string(both.Infer().message()), HasSubstr("combines 0 and -1"));
}

TEST(ReshapeShapeTest, ShapeMustBeConstant) {
  OpTestNode node("Reshape", {F32({2, 3}), I64({2})});
  const absl::Status status = node.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()), HasSubstr("input 1 'shape' must be known"));
}

TEST(SoftmaxShapeTest, AxisRangeDependsOnRank) {
  EXPECT_THAT(OpTestNode("Softmax", {F32({2, 3})}, 11).OutputShape(), ElementsAre(2, 3));
  OpTestNode bad("Softmax", {F32({2, 3})});
  bad.Set("axis", int64_t{2});
  EXPECT_THAT(std::string(bad.Infer().message()), HasSubstr("'axis' must be in [-2, 1]"));
}

TEST(ConstantShapeTest, ValueAttributes) {
  OpTestNode ints("Constant", {});
  ints.Set("value_ints", std::vector<int64_t>{1, 2, 3});
  ASSERT_TRUE(ints.Infer().ok());
  EXPECT_EQ(ints.spec().outputs[0], I64({3}));
  OpTestNode scalar("Constant", {});
  scalar.Set("value_float", 2.5f);
  ASSERT_TRUE(scalar.Infer().ok());
  EXPECT_EQ(scalar.spec().outputs[0], F32({}));
  OpTestNode tensor("Constant", {});
  tensor.Set("value", Tensor::Host(DType::kFloat32, {2, 2}));
  ASSERT_TRUE(tensor.Infer().ok());
  EXPECT_EQ(tensor.spec().outputs[0], F32({2, 2}));
}

TEST(ConstantShapeTest, ExactlyOneValue) {
  OpTestNode none("Constant", {});
  EXPECT_THAT(std::string(none.Infer().message()), HasSubstr("received 0"));
  OpTestNode two("Constant", {});
  two.Set("value_int", int64_t{1}).Set("value_float", 1.0f);
  EXPECT_THAT(std::string(two.Infer().message()), HasSubstr("received 2"));
  OpTestNode strings("Constant", {});
  strings.Set("value_string", std::string("x"));
  EXPECT_EQ(strings.Infer().code(), absl::StatusCode::kUnimplemented);
}

TEST(InputCountTest, MissingRequiredInputIsNamed) {
  OpTestNode node("Gemm", {F32({2, 2}), std::nullopt});
  EXPECT_THAT(std::string(node.Infer().message()),
              AllOf(HasSubstr("Gemm node 'n1'"), HasSubstr("input 1 'B' is required")));
  OpTestNode many("Relu", {F32({2}), F32({2})});
  EXPECT_THAT(std::string(many.Infer().message()), HasSubstr("expected 1 inputs, received 2"));
}

TEST(ActivationShapeTest, FloatOnlyOpsAndTheirAttributes) {
  for (const char* op : {"Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Sqrt"}) {
    SCOPED_TRACE(op);
    EXPECT_THAT(OpTestNode(op, {F32({2, 3})}).OutputShape(), ElementsAre(2, 3));
    const absl::Status ints = OpTestNode(op, {I64({2})}).Infer();
    EXPECT_EQ(ints.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ints.message()),
                AllOf(HasSubstr(std::string(op) + " node 'n1'"), HasSubstr("must be float32"),
                      HasSubstr("received int64[2]")));
  }
  // ONNX defines Erf for integers too; replicad does not compute them.
  EXPECT_EQ(OpTestNode("Erf", {I64({2})}).Infer().code(), absl::StatusCode::kUnimplemented);
  OpTestNode alpha("LeakyRelu", {F32({2})});
  alpha.Set("alpha", int64_t{1});
  const absl::Status status = alpha.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("LeakyRelu node 'n1'"), HasSubstr("'alpha'"), HasSubstr("FLOAT")));
}

TEST(ClipShapeTest, BoundsAreOptionalScalarsOfTheInputsDType) {
  EXPECT_THAT(OpTestNode("Clip", {F32({2, 3}), std::nullopt, F32({})}).OutputShape(),
              ElementsAre(2, 3));
  EXPECT_THAT(OpTestNode("Clip", {I64({4}), I64({1})}, 12).OutputShape(), ElementsAre(4));
  OpTestNode vector("Clip", {F32({3}), F32({2})});
  const absl::Status status = vector.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("Clip node 'n1'"), HasSubstr("input 1 'min'"),
                    HasSubstr("must be a float32 scalar"), HasSubstr("received float32[2]")));
  EXPECT_THAT(std::string(OpTestNode("Clip", {F32({3}), std::nullopt, I64({})}).Infer().message()),
              AllOf(HasSubstr("input 2 'max'"), HasSubstr("received int64[]")));
  // Integer data arrived in opset 12.
  EXPECT_EQ(OpTestNode("Clip", {I64({4})}, 11).Infer().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DropoutShapeTest, InferenceOnly) {
  EXPECT_THAT(OpTestNode("Dropout", {F32({2, 3}), F32({})}, 13).OutputShape(), ElementsAre(2, 3));
  OpTestNode training("Dropout", {F32({2}), F32({}), I64({})}, 13);
  const absl::Status status = training.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("Dropout node 'n1'"), HasSubstr("input 2 'training_mode'")));
  EXPECT_THAT(std::string(OpTestNode("Dropout", {F32({2}), F32({2})}, 13).Infer().message()),
              AllOf(HasSubstr("input 1 'ratio' must be a float32 scalar"),
                    HasSubstr("received float32[2]")));
  // Before opset 12 the ratio is an attribute and there is one input.
  EXPECT_THAT(std::string(OpTestNode("Dropout", {F32({2}), F32({})}, 11).Infer().message()),
              HasSubstr("expected 1 inputs, received 2"));
}

TEST(PowShapeTest, MixedDTypesFromOpset12) {
  EXPECT_EQ(OpTestNode("Pow", {F32({2, 3}), I64({3})}).OutputShape(), (Shape{2, 3}));
  OpTestNode int_base("Pow", {I64({2}), F32({})});
  ASSERT_TRUE(int_base.Infer().ok());
  EXPECT_EQ(int_base.spec().outputs[0], I64({2}));
  OpTestNode old("Pow", {F32({2}), I64({2})}, 11);
  EXPECT_THAT(
      std::string(old.Infer().message()),
      AllOf(HasSubstr("Pow node 'n1'"), HasSubstr("input 1 'Y' must have X's dtype float32"),
            HasSubstr("received int64[2]")));
  EXPECT_THAT(std::string(OpTestNode("Pow", {F32({2, 3}), F32({2})}).Infer().message()),
              HasSubstr("X float32[2,3] and Y float32[2] do not broadcast"));
}

TEST(BatchNormalizationShapeTest, PerChannelInputsAndTrainingMode) {
  const TensorType c3 = F32({3});
  EXPECT_THAT(OpTestNode("BatchNormalization", {F32({2, 3, 4, 4}), c3, c3, c3, c3}).OutputShape(),
              ElementsAre(2, 3, 4, 4));
  OpTestNode scale("BatchNormalization", {F32({2, 3, 4}), F32({4}), c3, c3, c3});
  const absl::Status status = scale.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("BatchNormalization node 'n1'"), HasSubstr("input 1 'scale'"),
                    HasSubstr("must be float32[3]"), HasSubstr("received float32[4]")));
  EXPECT_THAT(std::string(OpTestNode("BatchNormalization", {F32({2, 3}), c3, c3, c3, std::nullopt})
                              .Infer()
                              .message()),
              HasSubstr("input 4 'input_var' is required"));
  OpTestNode training("BatchNormalization", {F32({2, 3}), c3, c3, c3, c3}, 15);
  training.Set("training_mode", int64_t{1});
  EXPECT_EQ(training.Infer().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(
      std::string(OpTestNode("BatchNormalization", {F32({}), c3, c3, c3, c3}).Infer().message()),
      HasSubstr("input 0 'X' must have rank >= 1, received float32[]"));
}

TEST(LogSoftmaxShapeTest, SharesSoftmaxAxisRules) {
  EXPECT_THAT(OpTestNode("LogSoftmax", {F32({2, 3})}, 11).OutputShape(), ElementsAre(2, 3));
  OpTestNode bad("LogSoftmax", {F32({2, 3})});
  bad.Set("axis", int64_t{-3});
  EXPECT_THAT(std::string(bad.Infer().message()),
              AllOf(HasSubstr("LogSoftmax node 'n1'"), HasSubstr("'axis' must be in [-2, 1]"),
                    HasSubstr("received -3")));
}

TEST(ReduceShapeTest, AxesKeepdimsAndNoop) {
  OpTestNode mean("ReduceMean", {F32({2, 3, 4})});
  mean.Set("axes", std::vector<int64_t>{-1, 0}).Set("keepdims", int64_t{0});
  EXPECT_THAT(mean.OutputShape(), ElementsAre(3));
  EXPECT_THAT(OpTestNode("ReduceMean", {F32({2, 3})}).OutputShape(), ElementsAre(1, 1));
  OpTestNode sum("ReduceSum", {I64({2, 3, 4}), I64({1})});
  sum.Constant(1, {1});
  EXPECT_THAT(sum.OutputShape(), ElementsAre(2, 1, 4));
  OpTestNode noop("ReduceSum", {F32({2, 3}), I64({0})});
  noop.Set("noop_with_empty_axes", int64_t{1}).Constant(1, {});
  EXPECT_THAT(noop.OutputShape(), ElementsAre(2, 3));
  OpTestNode all("ReduceSum", {F32({2, 3})});
  all.Set("keepdims", int64_t{0});
  EXPECT_THAT(all.OutputShape(), ElementsAre());
  // Before opset 13 ReduceSum's axes are an attribute.
  OpTestNode old("ReduceSum", {F32({2, 3})}, 11);
  old.Set("axes", std::vector<int64_t>{1});
  EXPECT_THAT(old.OutputShape(), ElementsAre(2, 1));
}

TEST(ReduceShapeTest, BadAxesAreNamed) {
  OpTestNode range("ReduceMean", {F32({2, 3})});
  range.Set("axes", std::vector<int64_t>{0, 2});
  const absl::Status status = range.Infer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("ReduceMean node 'n1'"), HasSubstr("attribute 'axes' [0,2]"),
                    HasSubstr("in [-2, 1] for rank 2")));
  OpTestNode repeat("ReduceSum", {F32({2, 3}), I64({2})});
  repeat.Constant(1, {1, -1});
  EXPECT_THAT(std::string(repeat.Infer().message()),
              AllOf(HasSubstr("input 1 'axes' [1,-1]"), HasSubstr("names axis 1 twice")));
  const absl::Status unknown = OpTestNode("ReduceSum", {F32({2, 3}), I64({1})}).Infer();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("input 1 'axes' must be known"));
  EXPECT_THAT(
      std::string(OpTestNode("ReduceSum", {F32({2, 3}), F32({1})}).Infer().message()),
      AllOf(HasSubstr("input 1 'axes' must be 1-D int64"), HasSubstr("received float32[1]")));
  // ReduceMean takes its axes as an attribute through opset 17.
  EXPECT_THAT(std::string(OpTestNode("ReduceMean", {F32({2, 3}), I64({1})}).Infer().message()),
              HasSubstr("expected 1 inputs, received 2"));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// An input dim of 0 has nothing to read for a non-empty output dim: the
// node is refused (both backends' kernels would otherwise read past X).
TEST(ResizeShapeTest, EmptyInputDimWithNonEmptyOutputIsRefused) {
  OpTestNode refused("Resize", {F32({1, 0, 4}), std::nullopt, std::nullopt, std::nullopt});
  refused.Constant(3, {1, 2, 8});
  EXPECT_THAT(refused.Error(),
              HasSubstr("input 0 'X' has no elements along dim 1, so output dim 1 must be 0; "
                        "received 2"));
  OpTestNode empty("Resize", {F32({1, 0, 4}), std::nullopt, std::nullopt, std::nullopt});
  empty.Constant(3, {1, 0, 8});
  EXPECT_EQ(empty.OutputShape(), (Shape{1, 0, 8}));
}

}  // namespace
}  // namespace replicad
