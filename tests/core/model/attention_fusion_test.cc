// The load-time attention fusion (attention_fusion.h): which exported forms
// become one replicad.Attention and which stay as they are, and that a fused
// model answers what the same model loaded without the optimizer answers
// (relative L2 under 1e-5: the same float products, summed in blocks).
#include "core/model/attention_fusion.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/ops/attention_attributes.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::RandomTensor;
using Kind = AttentionStep::Kind;

constexpr int64_t kHeads = 2, kTokens = 6, kHead = 4;

int CountOf(const Graph& graph, const std::string& op_type) {
  int count = 0;
  for (const Node& node : graph.nodes) count += node.op_type == op_type;
  return count;
}

std::vector<AttentionStep> StepsOf(const Graph& graph) {
  for (const Node& node : graph.nodes) {
    if (node.op_type != kAttention) continue;
    std::vector<int64_t> ints = *node.attributes.GetInts(kAttentionSteps, {});
    std::vector<AttentionStep> steps;
    for (size_t i = 0; i + 2 < ints.size(); i += 3) {
      steps.push_back({static_cast<Kind>(ints[i]), static_cast<int>(ints[i + 1]),
                       static_cast<int>(ints[i + 2])});
    }
    return steps;
  }
  return {};
}

// q [N, H, S, d], k [N, H, S, d] (transposed inside), v [N, H, S, d]; `scores`
// writes the nodes from "s" (MatMul of q and kt) to "z", which the Softmax
// reads.
OnnxModelBuilder Attention(const std::string& name,
                           const std::function<void(OnnxModelBuilder&)>& scores,
                           std::vector<int64_t> output = {kAnyDim, kHeads, kTokens, kHead}) {
  OnnxModelBuilder b(name, 17);
  for (const char* input : {"q", "k", "v"}) {
    b.AddInput(input, DType::kFloat32, {kAnyDim, kHeads, kTokens, kHead});
  }
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.AddNode("MatMul", {"q", "kt"}, {"s"});
  scores(b);
  b.AddNode("Softmax", {"z"}, {"p"});
  b.AddNode("MatMul", {"p", "v"}, {"y"});
  b.AddOutput("y", DType::kFloat32, output);
  return b;
}

Tensor Scalar(float value) {
  Tensor t = Tensor::Host(DType::kFloat32, {});
  t.data<float>()[0] = value;
  return t;
}

// The causal mask of torch.triu(ones, diagonal=1): true above the diagonal.
Tensor Causal() {
  Tensor t = Tensor::Host(DType::kBool, {kTokens, kTokens});
  for (int64_t r = 0; r < kTokens; ++r) {
    for (int64_t c = 0; c < kTokens; ++c) t.data<uint8_t>()[r * kTokens + c] = c > r;
  }
  return t;
}

std::vector<Tensor> Inputs(int64_t batch, uint64_t seed) {
  std::vector<Tensor> inputs;
  for (uint64_t i = 0; i < 3; ++i) {
    inputs.push_back(RandomTensor({batch, kHeads, kTokens, kHead}, seed + i));
  }
  return inputs;
}

std::vector<Tensor> Predict(std::shared_ptr<const Model> model, std::vector<Tensor> inputs) {
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(std::move(model), {1});
  testing::PredictOutcome outcome = testing::PredictAndWait(*set, std::move(inputs));
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  return outcome.outputs;
}

// Loads `bytes` with and without the optimizer and compares their answers.
std::shared_ptr<const Model> ExpectFusedAnswersAsUnfused(const std::string& bytes,
                                                         std::vector<Tensor> inputs) {
  std::shared_ptr<const Model> fused = testing::LoadOrDie(bytes, "fused");
  OnnxImportOptions plain;
  plain.optimize = false;
  std::shared_ptr<const Model> unfused = *LoadOnnxBytes(bytes, "unfused", "unfused", plain);
  const std::vector<Tensor> expected = Predict(unfused, inputs);
  const std::vector<Tensor> actual = Predict(fused, inputs);
  EXPECT_EQ(actual.size(), 1u);
  if (actual.size() == 1 && expected.size() == 1) {
    EXPECT_LT(testing::RelativeL2(actual[0], expected[0]), 1e-5);
  }
  return fused;
}

// BERT as PyTorch's nn.MultiheadAttention exports it: a scale, then an
// additive padding mask.
TEST(AttentionFusionTest, ScaleAndAdditiveMaskBecomeOneNode) {
  OnnxModelBuilder b = Attention("bert", [](OnnxModelBuilder& b) {
    b.AddInitializer("scale", Scalar(0.5f));
    b.AddInput("mask", DType::kFloat32, {kAnyDim, 1, 1, kTokens});
    b.AddNode("Mul", {"s", "scale"}, {"scaled"});
    b.AddNode("Add", {"mask", "scaled"}, {"z"});  // S on the right.
  });
  std::vector<Tensor> inputs = Inputs(3, 1);
  inputs.push_back(RandomTensor({3, 1, 1, kTokens}, 9));
  std::shared_ptr<const Model> model = ExpectFusedAnswersAsUnfused(b.Serialize(), inputs);
  const Graph& graph = model->graph();
  EXPECT_EQ(CountOf(graph, std::string(kAttention)), 1);
  EXPECT_EQ(CountOf(graph, "Softmax"), 0);
  EXPECT_EQ(CountOf(graph, "MatMul"), 0);
  EXPECT_EQ(StepsOf(graph), (std::vector<AttentionStep>{{Kind::kMul, 3, -1}, {Kind::kAdd, 4, -1}}));
}

// GPT-2 code: a Div by sqrt(d), then masked_fill of torch.triu's causal mask.
TEST(AttentionFusionTest, DivAndCausalFillBecomeOneNode) {
  OnnxModelBuilder b = Attention("gpt", [](OnnxModelBuilder& b) {
    b.AddInitializer("root", Scalar(2.0f));
    b.AddInitializer("causal", Causal());
    b.AddInitializer("fill", Scalar(-std::numeric_limits<float>::infinity()));
    b.AddNode("Div", {"s", "root"}, {"scaled"});
    b.AddNode("Where", {"causal", "fill", "scaled"}, {"z"});
  });
  std::shared_ptr<const Model> model = ExpectFusedAnswersAsUnfused(b.Serialize(), Inputs(2, 11));
  EXPECT_EQ(CountOf(model->graph(), std::string(kAttention)), 1);
  EXPECT_EQ(StepsOf(model->graph()),
            (std::vector<AttentionStep>{{Kind::kDiv, 3, -1}, {Kind::kFillWhere, 4, 5}}));
}

// Where(keep, S, fill): S when the mask keeps the key. A sequence whose keys
// are all dropped answers NaN in both forms.
TEST(AttentionFusionTest, AKeepMaskFillsWhereFalseAndAllDroppedIsNaN) {
  OnnxModelBuilder b = Attention("keep", [](OnnxModelBuilder& b) {
    b.AddInput("keep", DType::kBool, {kAnyDim, 1, 1, kTokens});
    b.AddInitializer("fill", Scalar(-std::numeric_limits<float>::infinity()));
    b.AddNode("Where", {"keep", "s", "fill"}, {"z"});
  });
  std::vector<Tensor> inputs = Inputs(2, 21);
  Tensor keep = Tensor::Host(DType::kBool, {2, 1, 1, kTokens});
  for (int64_t i = 0; i < 2 * kTokens; ++i) keep.data<uint8_t>()[i] = i < kTokens && i % 3 != 0;
  inputs.push_back(keep);
  std::shared_ptr<const Model> fused = testing::LoadOrDie(b.Serialize(), "fused");
  EXPECT_EQ(StepsOf(fused->graph()), (std::vector<AttentionStep>{{Kind::kFillUnless, 3, 4}}));
  const std::vector<Tensor> y = Predict(fused, inputs);
  ASSERT_EQ(y.size(), 1u);
  const int64_t per_entry = kHeads * kTokens * kHead;
  for (int64_t i = 0; i < 2 * per_entry; ++i) {
    EXPECT_EQ(std::isnan(y[0].data<float>()[i]), i >= per_entry) << "element " << i;
  }
  // The first entry, alone, as the unfused model answers it.
  std::vector<Tensor> first;
  for (const Tensor& t : inputs) {
    Shape shape = t.shape();
    shape[0] = 1;
    Tensor row = Tensor::Host(t.dtype(), shape);
    std::memcpy(row.raw_data(), t.raw_data(), row.byte_size());
    first.push_back(row);
  }
  ExpectFusedAnswersAsUnfused(b.Serialize(), first);
}

// What must stay unfused: probabilities the caller also receives, a
// softmax over another axis, scores the caller also receives.
TEST(AttentionFusionTest, FormsThatAreNotPlainAttentionStay) {
  {
    OnnxModelBuilder b =
        Attention("weights_out", [](OnnxModelBuilder& b) { b.AddNode("Identity", {"s"}, {"z"}); });
    b.AddOutput("p", DType::kFloat32, {kAnyDim, kHeads, kTokens, kTokens});
    std::shared_ptr<const Model> model = testing::LoadOrDie(b.Serialize(), "m");
    EXPECT_EQ(CountOf(model->graph(), std::string(kAttention)), 0);
    EXPECT_EQ(CountOf(model->graph(), "Softmax"), 1);
  }
  {
    OnnxModelBuilder b("other_axis", 17);
    for (const char* input : {"q", "k", "v"}) {
      b.AddInput(input, DType::kFloat32, {kAnyDim, kHeads, kTokens, kHead});
    }
    OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
    b.AddNode("MatMul", {"q", "kt"}, {"s"});
    OnnxModelBuilder::SetInt(b.AddNode("Softmax", {"s"}, {"p"}), "axis", 2);
    b.AddNode("MatMul", {"p", "v"}, {"y"});
    b.AddOutput("y", DType::kFloat32, {kAnyDim, kHeads, kTokens, kHead});
    std::shared_ptr<const Model> model = ExpectFusedAnswersAsUnfused(b.Serialize(), Inputs(2, 31));
    EXPECT_EQ(CountOf(model->graph(), std::string(kAttention)), 0);
  }
  {
    OnnxModelBuilder b =
        Attention("scores_out", [](OnnxModelBuilder& b) { b.AddNode("Identity", {"s"}, {"z"}); });
    b.AddOutput("s", DType::kFloat32, {kAnyDim, kHeads, kTokens, kTokens});
    std::shared_ptr<const Model> model = testing::LoadOrDie(b.Serialize(), "m");
    EXPECT_EQ(CountOf(model->graph(), std::string(kAttention)), 0);
  }
}

// GPT-2 code: Q, K and V split from one projection as [N, S, H, d], moved
// to heads first by Transposes, the output moved back. The node reads and
// writes through them: no Transpose is left.
TEST(AttentionFusionTest, TransposesAroundTheAttentionAreReadThrough) {
  OnnxModelBuilder b("gpt_layout", 17);
  for (const char* input : {"q", "k", "v"}) {
    b.AddInput(input, DType::kFloat32, {kAnyDim, kTokens, kHeads, kHead});
  }
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"q"}, {"qh"}), "perm", {0, 2, 1, 3});
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"k"}, {"kt"}), "perm", {0, 2, 3, 1});
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"v"}, {"vh"}), "perm", {0, 2, 1, 3});
  b.AddInitializer("scale", Scalar(0.5f));
  b.AddNode("MatMul", {"qh", "kt"}, {"s"});
  b.AddNode("Mul", {"s", "scale"}, {"z"});
  b.AddNode("Softmax", {"z"}, {"p"});
  b.AddNode("MatMul", {"p", "vh"}, {"yh"});
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"yh"}, {"y"}), "perm", {0, 2, 1, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kTokens, kHeads, kHead});
  std::vector<Tensor> inputs;
  for (uint64_t i = 0; i < 3; ++i)
    inputs.push_back(RandomTensor({3, kTokens, kHeads, kHead}, 60 + i));
  std::shared_ptr<const Model> model = ExpectFusedAnswersAsUnfused(b.Serialize(), inputs);
  ASSERT_EQ(model->graph().nodes.size(), 1u);
  const Attributes& attributes = model->graph().nodes[0].attributes;
  EXPECT_EQ(*attributes.GetInts(kAttentionPerms[1], {}), (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(*attributes.GetInts(kAttentionPerms[3], {}), (std::vector<int64_t>{0, 2, 1, 3}));
}

// A bias of rank 5 makes S 5-D; the MatMul with v then broadcasts it. The
// fused node broadcasts as the nodes did.
TEST(AttentionFusionTest, AMaskThatAddsABatchDimFusesAndBroadcastsAsTheNodesDid) {
  OnnxModelBuilder b =
      Attention("raises_rank",
                [](OnnxModelBuilder& b) {
                  b.AddInitializer("bias", RandomTensor({2, 1, kHeads, kTokens, kTokens}, 41));
                  b.AddNode("Add", {"s", "bias"}, {"z"});
                },
                {2, kAnyDim, kHeads, kTokens, kHead});
  std::shared_ptr<const Model> model = ExpectFusedAnswersAsUnfused(b.Serialize(), Inputs(1, 51));
  EXPECT_EQ(CountOf(model->graph(), std::string(kAttention)), 1);
}

}  // namespace
}  // namespace replicad
