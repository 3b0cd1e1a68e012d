// Placement (core/model/placement.h): rules parse as Theano-style maps and
// malformed ones are refused naming the rule; a chain cut in two becomes two
// parts, the second waiting on the first, each with only its own weights and
// the values it hands over; unplaced nodes follow their inputs; a chain
// placed back and forth makes a part per visit (no part waits on a later
// one); two branches placed apart stay independent, the node that joins them
// waiting on both; unknown contexts and rules that match nothing are refused.

#include "core/model/placement.h"

#include <set>
#include <string>
#include <vector>

#include "core/model/onnx_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kContexts = {"dev0", "dev1"};

std::string Names(const Graph& graph, const std::vector<int>& values) {
  std::string names;
  for (int v : values) names += (names.empty() ? "" : ",") + graph.values[v].name;
  return names;
}

std::set<std::string> NodeNames(const Graph& graph) {
  std::set<std::string> names;
  for (const Node& node : graph.nodes) names.insert(node.name);
  return names;
}

TEST(PlacementTest, RulesParseAndMalformedOnesAreRefusedNamingTheRule) {
  absl::StatusOr<std::vector<PlacementRule>> rules =
      ParsePlacement(" /layer1/* -> dev0 ;/layer3/->dev1; ", "parameters.placement");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 2u);
  EXPECT_EQ((*rules)[0].pattern, "/layer1/*");
  EXPECT_EQ((*rules)[0].context, "dev0");
  EXPECT_EQ((*rules)[1].pattern, "/layer3/");
  EXPECT_EQ((*rules)[1].context, "dev1");

  EXPECT_EQ(ParsePlacement("layer1 dev0", "--placement").status().message(),
            "--placement: rule 'layer1 dev0' has no '->', expected PATTERN->CONTEXT");
  EXPECT_THAT(std::string(ParsePlacement("->dev0", "--placement").status().message()),
              HasSubstr("needs both a node-name pattern and a context"));
  EXPECT_THAT(std::string(ParsePlacement(" ; ", "--placement").status().message()),
              HasSubstr("expected rules PATTERN->CONTEXT"));
}

TEST(PlacementTest, AChainCutInTwoHandsOneValueOver) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(4, 8), "m");
  const Graph& graph = model->graph();
  absl::StatusOr<PlacedGraph> placed =
      PlaceGraph(graph, *ParsePlacement("layer0*->dev0; layer2*->dev1", "p"), kContexts);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->parts.size(), 2u);
  const GraphPart& first = placed->parts[0];
  const GraphPart& second = placed->parts[1];
  EXPECT_EQ(first.context, "dev0");
  EXPECT_EQ(second.context, "dev1");
  EXPECT_TRUE(first.after.empty());
  EXPECT_THAT(second.after, ElementsAre(0));
  // layer1 follows layer0 (its input's), layer3 follows layer2.
  for (const Node& node : first.graph.nodes)
    EXPECT_THAT(node.name, ::testing::MatchesRegex("layer[01].*"));
  for (const Node& node : second.graph.nodes)
    EXPECT_THAT(node.name, ::testing::MatchesRegex("layer[23].*"));
  EXPECT_EQ(Names(graph, first.graph.inputs), "x");
  EXPECT_EQ(first.graph.outputs, second.graph.inputs);
  ASSERT_EQ(first.graph.outputs.size(), 1u);
  EXPECT_EQ(Names(graph, second.graph.outputs), "y");
  std::set<std::string> weights;
  for (const auto& [v, tensor] : first.graph.initializers) weights.insert(graph.values[v].name);
  EXPECT_THAT(weights, ElementsAre("layer0.weight", "layer1.weight"));
  EXPECT_EQ(second.graph.initializers.size(), 2u);
  EXPECT_EQ(placed->part_of_node.size(), graph.nodes.size());
}

TEST(PlacementTest, BackAndForthMakesAPartPerVisitInOrder) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(4, 8), "m");
  absl::StatusOr<PlacedGraph> placed =
      PlaceGraph(model->graph(),
                 *ParsePlacement("layer0*->dev0; layer1*->dev1; layer2*->dev0; layer3*->dev1", "p"),
                 kContexts);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->parts.size(), 4u);
  for (size_t p = 0; p < 4; ++p) {
    EXPECT_EQ(placed->parts[p].context, kContexts[p % 2]);
    if (p > 0) {
      EXPECT_THAT(placed->parts[p].after, ElementsAre(p - 1));
    }
  }
}

// Theano's example: x feeds two products placed on two contexts; their sum,
// placed by neither rule, follows its first input's context but waits on both.
std::string TwoBranchesOnnx() {
  OnnxModelBuilder b("branches", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddInitializer("wl", testing::RandomTensor({4, 4}, 1));
  b.AddInitializer("wr", testing::RandomTensor({4, 4}, 2));
  b.AddNode("MatMul", {"x", "wl"}, {"left"});
  b.AddNode("MatMul", {"x", "wr"}, {"right"});
  b.AddNode("Add", {"left", "right"}, {"y"});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  return b.Serialize();
}

TEST(PlacementTest, BranchesPlacedApartStayIndependent) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(TwoBranchesOnnx(), "m");
  absl::StatusOr<PlacedGraph> placed =
      PlaceGraph(model->graph(), *ParsePlacement("left->dev0; right->dev1", "p"), kContexts);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->parts.size(), 3u);
  EXPECT_EQ(NodeNames(placed->parts[0].graph), std::set<std::string>{"left"});
  EXPECT_EQ(NodeNames(placed->parts[1].graph), std::set<std::string>{"right"});
  EXPECT_TRUE(placed->parts[0].after.empty());
  EXPECT_TRUE(placed->parts[1].after.empty());  // The two run side by side.
  EXPECT_EQ(NodeNames(placed->parts[2].graph), std::set<std::string>{"y"});
  EXPECT_EQ(placed->parts[2].context, "dev0");
  EXPECT_THAT(placed->parts[2].after, ElementsAre(0, 1));
}

TEST(PlacementTest, UnknownContextsAndRulesThatMatchNothingAreRefused) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(TwoBranchesOnnx(), "m");
  absl::StatusOr<PlacedGraph> placed =
      PlaceGraph(model->graph(), *ParsePlacement("left->gpu7", "p"), kContexts);
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(placed.status().message(),
            "placement rule 'left->gpu7' names context 'gpu7', expected one of the device map's: "
            "dev0, dev1");
  placed = PlaceGraph(model->graph(), *ParsePlacement("left->dev0; /nope/*->dev1", "p"), kContexts);
  EXPECT_EQ(placed.status().message(),
            "placement rule '/nope/*->dev1' matches no node of the model");
}

}  // namespace
}  // namespace replicad
