// RowMixingNode: which graphs compute every row of a batch on its own (and
// may be split over slots and fused with other requests) and which mix rows
// (issue #38's hostile probe: ReduceMax over dim 0, CumSum along it,
// GatherND indexing rows answered one client with another's rows). The
// batch dim is followed where transposes move it (attention as
// nn.MultiheadAttention exports it puts it in dim 1 and back).
#include "core/model/row_mixing.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "core/model/default_model.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

Tensor Int64s(const std::vector<int64_t>& values) {
  Tensor t = Tensor::Host(DType::kInt64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

// x [N, 3, 4] through one node (`inputs` beyond x are initializers named
// c1, c2, ...), then y.
std::string OneNode(const std::string& op, const std::vector<Tensor>& constants,
                    void (*set)(onnx::NodeProto*) = nullptr, DType out = DType::kFloat32,
                    int out_rank = 3) {
  OnnxModelBuilder b("m", 13);
  std::vector<std::string> inputs = {"x"};
  for (size_t i = 0; i < constants.size(); ++i) {
    inputs.push_back("c" + std::to_string(i + 1));
    b.AddInitializer(inputs.back(), constants[i]);
  }
  onnx::NodeProto* node = b.AddNode(op, inputs, {"y"});
  if (set != nullptr) set(node);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3, 4});
  b.AddOutput("y", out, std::vector<int64_t>(out_rank, kAnyDim));
  return RowMixingNode(testing::LoadOrDie(b.Serialize(), "m")->graph());
}

TEST(RowMixingTest, ReductionsAndScansAlongTheBatchDimMixRows) {
  EXPECT_THAT(OneNode("ReduceSum", {Int64s({0})}), HasSubstr("over the batch dim"));
  EXPECT_THAT(OneNode("ReduceSum", {Int64s({-3})}), HasSubstr("over the batch dim"));
  EXPECT_EQ(OneNode("ReduceSum", {Int64s({1, 2})}), "");
  EXPECT_THAT(OneNode("ReduceSum", {}), HasSubstr("over every dim"));
  EXPECT_THAT(OneNode("CumSum", {Int64s({0})}), HasSubstr("along the batch dim"));
  EXPECT_EQ(OneNode("CumSum", {Int64s({2})}), "");
  // ArgMax: axis 0 by default.
  EXPECT_THAT(OneNode("ArgMax", {}, nullptr, DType::kInt64), HasSubstr("along the batch dim"));
  EXPECT_EQ(OneNode("Softmax", {}), "");  // axis -1 from opset 13
}

TEST(RowMixingTest, DynamicQuantizationMixesRowsAndStaticQuantizationDoesNot) {
  Tensor scale = Tensor::Host(DType::kFloat32, {});
  scale.data<float>()[0] = 0.1f;
  EXPECT_EQ(OneNode("QuantizeLinear", {scale}, nullptr, DType::kUint8), "");
  // DynamicQuantizeLinear's scale and zero point are the whole batch's.
  OnnxModelBuilder b("m", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3, 4});
  b.AddOutput("y", DType::kUint8, {kAnyDim, 3, 4});
  b.AddOutput("scale", DType::kFloat32, {});
  b.AddOutput("zero", DType::kUint8, {});
  b.AddNode("DynamicQuantizeLinear", {"x"}, {"y", "scale", "zero"});
  EXPECT_THAT(RowMixingNode(testing::LoadOrDie(b.Serialize(), "m")->graph()),
              HasSubstr("its scale and zero point come from every row"));
}

TEST(RowMixingTest, IndexingAndMovingRowsMixThem) {
  EXPECT_THAT(OneNode("GatherND", {Int64s({0})}, nullptr, DType::kFloat32, 2),
              HasSubstr("indexes rows"));
  EXPECT_THAT(OneNode("Gather", {Int64s({0})}), HasSubstr("indexes rows"));
  EXPECT_EQ(OneNode("Gather", {Int64s({0})},
                    [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "axis", 1); }),
            "");
  EXPECT_THAT(OneNode("Transpose", {},
                      [](onnx::NodeProto* n) {
                        OnnxModelBuilder::SetInts(n, "perm", {1, 0, 2});
                      }),
              HasSubstr("output 'y' (holds the batch in dim 1)"));
  EXPECT_EQ(OneNode("Transpose", {},
                    [](onnx::NodeProto* n) {
                      OnnxModelBuilder::SetInts(n, "perm", {0, 2, 1});
                    }),
            "");
  // Slice: all rows (end past any size) keep them; a cut does not.
  EXPECT_EQ(OneNode("Slice", {Int64s({0, 1}), Int64s({INT64_MAX, 2}), Int64s({0, 1})}), "");
  EXPECT_THAT(OneNode("Slice", {Int64s({0}), Int64s({1}), Int64s({0})}), HasSubstr("cuts rows"));
}

TEST(RowMixingTest, EinsumKeepsRowsWhenEveryRowOperandLeadsWithTheOutputsFirstLabel) {
  auto einsum = [](const char* equation, int out_rank = 3) {
    OnnxModelBuilder b("e", 13);
    onnx::NodeProto* node = b.AddNode("Einsum", {"x", "x"}, {"y"});
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name("equation");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(equation);
    b.AddInput("x", DType::kFloat32, {kAnyDim, 3, 3});
    b.AddOutput("y", DType::kFloat32, std::vector<int64_t>(out_rank, kAnyDim));
    return RowMixingNode(testing::LoadOrDie(b.Serialize(), "e")->graph());
  };
  EXPECT_EQ(einsum("bij,bjk->bik"), "");
  EXPECT_EQ(einsum("...ij,...jk->...ik"), "");
  EXPECT_THAT(einsum("bij,bjk->ik", 2), HasSubstr("along the batch dim"));
  EXPECT_THAT(einsum("bij,cjk->bik"), HasSubstr("along the batch dim"));
}

TEST(RowMixingTest, TheDefaultModelComputesEachRowOnItsOwn) {
  EXPECT_EQ(RowMixingNode((*LoadDefaultModel())->graph()), "");
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// The exported models of the parity test (when their fixtures exist): each
// computes every row on its own, so none may lose splitting and fusing.
TEST(RowMixingTest, ExportedModelsOfTheParityTestKeepTheirRows) {
  // The sanitizer runs point REPLICAD_PARITY_FIXTURES at the plain build's.
  const char* from_env = std::getenv("REPLICAD_PARITY_FIXTURES");
  const std::string dir = from_env != nullptr ? from_env : REPLICAD_PARITY_FIXTURES_DIR;
  int seen = 0;
  for (const char* name :
       {"resnet18", "densenet121", "shufflenet_v2_x0_5", "vit_b_32", "swin_t", "maxvit_t",
        "bert_encoder", "gpt_decoder", "deeplabv3_mobilenet_v3_large", "r3d_18"}) {
    const std::string path = dir + "/" + name + "/model.onnx";
    absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxFile(path, name);
    if (!model.ok()) continue;  // Not exported on this machine (yet).
    ++seen;
    EXPECT_EQ((*model)->row_mixing(), "") << name;
  }
  if (seen == 0) GTEST_SKIP() << "no parity fixtures under " << dir;
}

}  // namespace
}  // namespace replicad
