// Shape rules of the data-movement operators, ConvTranspose and AveragePool:
// output types for hand-computed cases the ONNX conformance data lacks, and
// the messages of malformed nodes (they must name the node, the input or
// attribute, the expected and the received value), and Unimplemented for the
// valid forms replicad does not compute.

#include <limits>
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

TEST(ValueInputsTest, RegistryNamesTheInputsShapeRulesRead) {
  EXPECT_TRUE(FindOp("Slice")->NeedsValue(1));
  EXPECT_TRUE(FindOp("Slice")->NeedsValue(4));
  EXPECT_FALSE(FindOp("Slice")->NeedsValue(0));
  EXPECT_TRUE(FindOp("Pad")->NeedsValue(2));
  EXPECT_TRUE(FindOp("ConstantOfShape")->NeedsValue(0));
  EXPECT_TRUE(FindOp("Unsqueeze")->NeedsValue(1));
  EXPECT_FALSE(FindOp("Gather")->NeedsValue(1));  // Indices are data.
}

TEST(TransposeShapeTest, PermutesDimsAndRejectsNonPermutations) {
  OpTestNode node("Transpose", {F32({2, 3, 4})});
  node.Set("perm", std::vector<int64_t>{1, 2, 0});
  EXPECT_THAT(node.OutputShape(), ElementsAre(3, 4, 2));
  OpTestNode bad("Transpose", {F32({2, 3, 4})});
  bad.Set("perm", std::vector<int64_t>{0, 0, 1});
  EXPECT_THAT(bad.Error(), AllOf(HasSubstr("Transpose node 'n1'"), HasSubstr("'perm'"),
                                 HasSubstr("permutation of [0, 3)"), HasSubstr("[0,0,1]")));
}

TEST(ConcatShapeTest, SumsAxisAndRejectsMismatches) {
  OpTestNode node("Concat", {I64({2, 1, 4}), I64({2, 0, 4}), I64({2, 5, 4})});
  node.Set("axis", int64_t{-2});
  EXPECT_EQ(node.Output(), I64({2, 6, 4}));
  OpTestNode bad("Concat", {F32({2, 3, 4}), F32({3, 5, 4})});
  bad.Set("axis", int64_t{1});
  EXPECT_THAT(bad.Error(), AllOf(HasSubstr("Concat node 'n1'"), HasSubstr("input 1"),
                                 HasSubstr("float32[2,?,4]"), HasSubstr("float32[3,5,4]")));
  OpTestNode dtype("Concat", {F32({2}), I64({2})});
  dtype.Set("axis", int64_t{0});
  EXPECT_THAT(dtype.Error(), HasSubstr("received int64[2]"));
  OpTestNode no_axis("Concat", {F32({2}), F32({2})});
  EXPECT_THAT(no_axis.Error(), HasSubstr("attribute 'axis' is required"));
  OpTestNode axis("Concat", {F32({2}), F32({2})});
  axis.Set("axis", int64_t{1});
  EXPECT_THAT(axis.Error(), AllOf(HasSubstr("'axis'"), HasSubstr("[-1, 0]"), HasSubstr("1")));
}

TEST(GatherShapeTest, SplicesIndicesShapeIntoData) {
  OpTestNode node("Gather", {F32({5, 4, 3}), I64({2, 6})});
  node.Set("axis", int64_t{-2});
  EXPECT_THAT(node.OutputShape(), ElementsAre(5, 2, 6, 3));
  OpTestNode bad("Gather", {F32({5, 4}), F32({2})});
  EXPECT_THAT(bad.Error(), AllOf(HasSubstr("input 1 'indices'"), HasSubstr("must be int64"),
                                 HasSubstr("received float32[2]")));
}

TEST(SliceShapeTest, ClampsBoundsAndWalksBackwards) {
  // Axis 0: from -3 + 10 = 7 to max, clamped to 10: 3 rows. Axis 2 (size 5): start 20
  // clamps to 4 and step -3 walks to end 0 (exclusive), reading 4 and 1. Axis 1 is kept.
  OpTestNode node("Slice",
                  {F32({10, 6, 5}), std::nullopt, std::nullopt, std::nullopt, std::nullopt}, 13);
  node.Constant(1, {-3, 20})
      .Constant(2, {std::numeric_limits<int64_t>::max(), 0})
      .Constant(3, {0, -1})
      .Constant(4, {1, -3});
  EXPECT_THAT(node.OutputShape(), ElementsAre(3, 6, 2));
  OpTestNode empty("Slice", {F32({20, 10}), std::nullopt, std::nullopt}, 13);
  empty.Constant(1, {30, 0}).Constant(2, {40, 10});
  EXPECT_THAT(empty.OutputShape(), ElementsAre(0, 10));
}

TEST(SliceShapeTest, MalformedAndUnknownInputs) {
  OpTestNode zero("Slice", {F32({4}), std::nullopt, std::nullopt, std::nullopt, std::nullopt}, 13);
  zero.Constant(1, {0}).Constant(2, {4}).Constant(3, {0}).Constant(4, {0});
  EXPECT_THAT(zero.Error(), AllOf(HasSubstr("Slice node 'n1'"), HasSubstr("input 4 'steps'"),
                                  HasSubstr("non-zero"), HasSubstr("[0]")));
  OpTestNode twice("Slice", {F32({4, 4}), std::nullopt, std::nullopt, std::nullopt}, 13);
  twice.Constant(1, {0, 0}).Constant(2, {1, 1}).Constant(3, {1, -1});
  EXPECT_THAT(twice.Error(),
              AllOf(HasSubstr("input 3 'axes'"), HasSubstr("[1,-1]"), HasSubstr("axis 1 twice")));
  OpTestNode lengths("Slice", {F32({4, 4}), std::nullopt, std::nullopt}, 13);
  lengths.Constant(1, {0, 0}).Constant(2, {1});
  EXPECT_THAT(lengths.Error(),
              AllOf(HasSubstr("input 2 'ends'"), HasSubstr("(2)"), HasSubstr("received [1]")));
  OpTestNode unknown("Slice", {F32({4}), I64({1}), I64({1})}, 13);
  EXPECT_THAT(unknown.Error(absl::StatusCode::kUnimplemented),
              AllOf(HasSubstr("input 1 'starts'"), HasSubstr("known when the plan is made")));
}

TEST(PadShapeTest, PadsAndCrops) {
  OpTestNode node("Pad", {I64({3, 4}), std::nullopt}, 13);
  node.Constant(1, {1, -1, 2, 3});
  EXPECT_EQ(node.Output(), I64({6, 6}));
}

TEST(PadShapeTest, MalformedPadsModeAndValue) {
  OpTestNode length("Pad", {F32({3, 4}), std::nullopt}, 13);
  length.Constant(1, {1, 2});
  EXPECT_THAT(length.Error(), AllOf(HasSubstr("Pad node 'n1'"), HasSubstr("input 1 'pads'"),
                                    HasSubstr("4 values"), HasSubstr("received [1,2]")));
  OpTestNode crop("Pad", {F32({3, 4}), std::nullopt}, 13);
  crop.Constant(1, {-2, 0, -2, 0});
  EXPECT_THAT(crop.Error(), AllOf(HasSubstr("crops 4 elements from dim 0"),
                                  HasSubstr("float32[3,4]"), HasSubstr("which has 3")));
  OpTestNode mode("Pad", {F32({3}), std::nullopt}, 13);
  mode.Constant(1, {1, 1}).Set("mode", std::string("symmetric"));
  EXPECT_THAT(mode.Error(), AllOf(HasSubstr("attribute 'mode'"), HasSubstr("'symmetric'")));
  OpTestNode empty("Pad", {F32({0, 2}), std::nullopt}, 13);
  empty.Constant(1, {1, 0, 0, 0}).Set("mode", std::string("edge"));
  EXPECT_THAT(empty.Error(),
              AllOf(HasSubstr("'edge' cannot extend dim 0"), HasSubstr("float32[0,2]")));
  OpTestNode value("Pad", {F32({3}), std::nullopt, std::nullopt}, 13);
  value.Constant(1, {1, 1}).Constant(2, {5});
  EXPECT_THAT(value.Error(), AllOf(HasSubstr("input 2 'constant_value'"),
                                   HasSubstr("one float32 element"), HasSubstr("int64[1]")));
  OpTestNode wrap("Pad", {F32({3}), std::nullopt}, 19);
  wrap.Constant(1, {1, 1}).Set("mode", std::string("wrap"));
  EXPECT_THAT(wrap.Error(absl::StatusCode::kUnimplemented), HasSubstr("'wrap'"));
}

TEST(SqueezeShapeTest, AxesAttributeInputAndErrors) {
  OpTestNode all("Squeeze", {F32({1, 3, 1, 2})});
  EXPECT_THAT(all.OutputShape(), ElementsAre(3, 2));
  OpTestNode attribute("Squeeze", {F32({1, 3, 1, 2})}, 12);
  attribute.Set("axes", std::vector<int64_t>{-2});
  EXPECT_THAT(attribute.OutputShape(), ElementsAre(1, 3, 2));
  OpTestNode bad("Squeeze", {F32({1, 3, 1}), std::nullopt}, 13);
  bad.Constant(1, {1});
  EXPECT_THAT(bad.Error(),
              AllOf(HasSubstr("Squeeze node 'n1'"), HasSubstr("input 1 'axes'"),
                    HasSubstr("size 1"), HasSubstr("float32[1,3,1]"), HasSubstr("dim 1 is 3")));
}

TEST(UnsqueezeShapeTest, InsertsAxesOfTheOutputRank) {
  OpTestNode node("Unsqueeze", {F32({3, 4}), std::nullopt}, 13);
  node.Constant(1, {-1, 0});
  EXPECT_THAT(node.OutputShape(), ElementsAre(1, 3, 4, 1));
  OpTestNode missing("Unsqueeze", {F32({3})}, 13);
  EXPECT_THAT(missing.Error(), HasSubstr("input 1 'axes' is required"));
  OpTestNode range("Unsqueeze", {F32({3})}, 11);
  range.Set("axes", std::vector<int64_t>{2});
  EXPECT_THAT(range.Error(),
              AllOf(HasSubstr("attribute 'axes'"), HasSubstr("[-2, 1]"), HasSubstr("rank 2")));
}

TEST(ExpandShapeTest, BroadcastsBothWaysAndNamesMismatches) {
  OpTestNode node("Expand", {F32({3, 1}), std::nullopt}, 13);
  node.Constant(1, {2, 1, 6});
  EXPECT_THAT(node.OutputShape(), ElementsAre(2, 3, 6));
  OpTestNode bad("Expand", {F32({3, 2}), std::nullopt}, 13);
  bad.Constant(1, {4, 3});
  EXPECT_THAT(bad.Error(), AllOf(HasSubstr("Expand node 'n1'"), HasSubstr("float32[3,2]"),
                                 HasSubstr("input 1 'shape' [4,3]")));
}

TEST(ShapeShapeTest, StartAndEndClampFromOpset15) {
  OpTestNode node("Shape", {F32({2, 3, 4, 5})}, 15);
  node.Set("start", int64_t{-10}).Set("end", int64_t{-1});
  EXPECT_EQ(node.Output(), I64({3}));
  OpTestNode empty("Shape", {F32({2, 3})}, 15);
  empty.Set("start", int64_t{2}).Set("end", int64_t{1});
  EXPECT_EQ(empty.Output(), I64({0}));
  EXPECT_EQ(OpTestNode("Shape", {I64({})}).Output(), I64({0}));
}

TEST(ConstantOfShapeShapeTest, ValueTypeAndErrors) {
  OpTestNode node("ConstantOfShape", {std::nullopt}, 13);
  node.Constant(0, {2, 0, 3});
  EXPECT_EQ(node.Output(), F32({2, 0, 3}));
  OpTestNode negative("ConstantOfShape", {std::nullopt}, 13);
  negative.Constant(0, {2, -1});
  EXPECT_THAT(negative.Error(), AllOf(HasSubstr("ConstantOfShape node 'n1'"),
                                      HasSubstr("non-negative"), HasSubstr("[2,-1]")));
  OpTestNode two("ConstantOfShape", {std::nullopt}, 13);
  Tensor value = Tensor::Host(DType::kInt64, {2});
  two.Constant(0, {2}).Set("value", value);
  EXPECT_THAT(two.Error(), AllOf(HasSubstr("attribute 'value'"), HasSubstr("one element"),
                                 HasSubstr("int64[2]")));
}

TEST(CastShapeTest, TargetTypes) {
  OpTestNode node("Cast", {F32({2, 3})});
  node.Set("to", int64_t{7});
  EXPECT_EQ(node.Output(), I64({2, 3}));
  OpTestNode missing("Cast", {F32({2})});
  EXPECT_THAT(missing.Error(), HasSubstr("attribute 'to' is required"));
  OpTestNode invalid("Cast", {F32({2})});
  invalid.Set("to", int64_t{0});
  EXPECT_THAT(invalid.Error(), AllOf(HasSubstr("attribute 'to'"), HasSubstr("received 0")));
  OpTestNode dbl("Cast", {F32({2})});
  dbl.Set("to", int64_t{11});
  EXPECT_THAT(dbl.Error(absl::StatusCode::kUnimplemented),
              AllOf(HasSubstr("Cast node 'n1'"), HasSubstr("DOUBLE (11)")));
}

TEST(ConvTransposeShapeTest, OutputSizeFromStridesPadsAndOutputPadding) {
  // H: 2 * (4 - 1) + 1 + (3 - 1) * 2 + 1 - 1 - 2 = 9; W: 3 * 4 + 0 + 2 - 0 - 0 = 14.
  OpTestNode node("ConvTranspose", {F32({2, 6, 4, 5}), F32({6, 2, 3, 2}), F32({6})});
  node.Set("group", int64_t{3})
      .Set("strides", std::vector<int64_t>{2, 3})
      .Set("dilations", std::vector<int64_t>{2, 1})
      .Set("pads", std::vector<int64_t>{1, 0, 2, 0})
      .Set("output_padding", std::vector<int64_t>{1, 0});
  EXPECT_THAT(node.OutputShape(), ElementsAre(2, 6, 9, 14));
  OpTestNode full("ConvTranspose", {F32({1, 1, 3, 3}), F32({1, 2, 3, 3})});
  full.Set("output_shape", std::vector<int64_t>{1, 2, 10, 8});
  EXPECT_THAT(full.OutputShape(), ElementsAre(1, 2, 10, 8));
  OpTestNode same("ConvTranspose", {F32({1, 1, 3, 3}), F32({1, 2, 3, 3})});
  same.Set("auto_pad", std::string("SAME_UPPER")).Set("strides", std::vector<int64_t>{2, 2});
  EXPECT_THAT(same.OutputShape(), ElementsAre(1, 2, 6, 6));
}

TEST(ConvTransposeShapeTest, MalformedNodesAndOtherRanks) {
  OpTestNode channels("ConvTranspose", {F32({1, 4, 3, 3}), F32({2, 2, 3, 3})});
  EXPECT_THAT(channels.Error(),
              AllOf(HasSubstr("ConvTranspose node 'n1'"), HasSubstr("input 1 'W'"),
                    HasSubstr("C = 4"), HasSubstr("float32[2,2,3,3]")));
  // M = W's dim 1 times group = 4.
  OpTestNode bias("ConvTranspose", {F32({1, 4, 3, 3}), F32({4, 2, 3, 3}), F32({2})});
  bias.Set("group", int64_t{2});
  EXPECT_THAT(bias.Error(), AllOf(HasSubstr("input 2 'B'"), HasSubstr("must be float32[4]"),
                                  HasSubstr("received float32[2]")));
  OpTestNode pads("ConvTranspose", {F32({1, 1, 2, 2}), F32({1, 1, 2, 2})});
  pads.Set("pads", std::vector<int64_t>{2, 0, 2, 0});
  EXPECT_THAT(pads.Error(), AllOf(HasSubstr("spatial dim 0"), HasSubstr("size -1")));
  EXPECT_THAT(OpTestNode("ConvTranspose", {F32({1, 1, 3}), F32({1, 2, 3})})
                  .Error(absl::StatusCode::kUnimplemented),
              HasSubstr("only 2-D"));
}

TEST(AveragePoolShapeTest, CeilModeAndErrors) {
  OpTestNode node("AveragePool", {F32({1, 3, 6, 7})});
  node.Set("kernel_shape", std::vector<int64_t>{3, 3})
      .Set("strides", std::vector<int64_t>{2, 2})
      .Set("ceil_mode", int64_t{1});
  EXPECT_THAT(node.OutputShape(), ElementsAre(1, 3, 3, 3));
  OpTestNode flag("AveragePool", {F32({1, 3, 6, 6})});
  flag.Set("kernel_shape", std::vector<int64_t>{2, 2}).Set("count_include_pad", int64_t{2});
  EXPECT_THAT(flag.Error(),
              AllOf(HasSubstr("AveragePool node 'n1'"),
                    HasSubstr("'count_include_pad' must be 0 or 1"), HasSubstr("received 2")));
  OpTestNode pool3d("AveragePool", {F32({1, 3, 4, 4, 4})});
  pool3d.Set("kernel_shape", std::vector<int64_t>{2, 2});
  EXPECT_THAT(pool3d.Error(), HasSubstr("'kernel_shape' must hold 3 positive values"));
  OpTestNode pool4d("AveragePool", {F32({1, 3, 4, 4, 4, 4})});
  pool4d.Set("kernel_shape", std::vector<int64_t>{2, 2, 2, 2});
  EXPECT_THAT(pool4d.Error(absl::StatusCode::kUnimplemented),
              HasSubstr("only 2-D average pooling"));
}

}  // namespace
}  // namespace replicad
