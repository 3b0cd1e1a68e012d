// `--placement auto` (core/serve/auto_placement.h): measured node costs
// cover the plan's kernels and the values' bytes at the measured rows; the
// node order is cut into runs of about equal cost, the cut taken where the
// fewest bytes cross among cuts within a tenth of a stage's share of cost;
// far from the balance the cut follows the cost; every context gets a node.

#include "core/serve/auto_placement.h"

#include <string>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

// Where context_of changes from one name to the next: the cuts.
std::vector<size_t> Cuts(const std::vector<std::string>& context_of) {
  std::vector<size_t> cuts;
  for (size_t n = 1; n < context_of.size(); ++n) {
    if (context_of[n] != context_of[n - 1]) cuts.push_back(n);
  }
  return cuts;
}

TEST(AutoPlacementTest, MeasuredCostsCoverEveryKernelAndValue) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(6, 32), "m");
  absl::StatusOr<NodeCosts> costs = MeasureNodeCosts(
      model, CreateCpuDevice(EnumerateCpuDevices()[0], CpuSlotOptions{1}), /*rows=*/4);
  ASSERT_TRUE(costs.ok()) << costs.status();
  const Graph& graph = model->graph();
  ASSERT_EQ(costs->seconds.size(), graph.nodes.size());
  double total = 0;
  for (double s : costs->seconds) {
    EXPECT_GE(s, 0);
    total += s;
  }
  EXPECT_GT(total, 0);
  EXPECT_EQ(costs->value_bytes[graph.inputs[0]], 4u * 32 * sizeof(float));
  EXPECT_EQ(costs->value_bytes[graph.outputs[0]], 4u * 32 * sizeof(float));
}

TEST(AutoPlacementTest, CutsBalanceCostAndTakeTheFewestBytesNearTheBalance) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(20, 8), "m");
  const Graph& graph = model->graph();
  const size_t n = graph.nodes.size();
  ASSERT_GE(n, 20u);
  NodeCosts costs;
  costs.seconds.assign(n, 1.0);
  costs.value_bytes.assign(graph.values.size(), 100);
  // Each node hands its one output to the next: the cut before node c
  // crosses node c - 1's output. Make the one a node after the balance cheap.
  const size_t half = n / 2;
  costs.value_bytes[graph.nodes[half].outputs[0]] = 1;
  EXPECT_THAT(Cuts(*BalancedContexts(graph, costs, {"dev0", "dev1"})),
              ::testing::ElementsAre(half + 1));
  // Without a cheap value the balance decides.
  costs.value_bytes.assign(graph.values.size(), 100);
  EXPECT_THAT(Cuts(*BalancedContexts(graph, costs, {"dev0", "dev1"})),
              ::testing::ElementsAre(half));
  // Costs skewed to the front: the first node alone is half the work.
  costs.seconds.assign(n, 1.0);
  costs.seconds[0] = static_cast<double>(n - 1);
  EXPECT_THAT(Cuts(*BalancedContexts(graph, costs, {"dev0", "dev1"})), ::testing::ElementsAre(1));
  // Three contexts over three nodes' worth of work in one: each still gets a node.
  costs.seconds.assign(n, 0.0);
  costs.seconds[n - 1] = 1.0;
  const std::vector<std::string> three = *BalancedContexts(graph, costs, {"a", "b", "c"});
  EXPECT_EQ(Cuts(three).size(), 2u);
  EXPECT_EQ(three.back(), "c");
}

// With a memory limit each run's weights fit: the cut moves before the
// balance when the first run's weights would not fit after it, and a limit
// no run can meet is refused naming the context.
TEST(AutoPlacementTest, CutsKeepEachRunsWeightsInTheLimit) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(20, 8), "m");
  const Graph& graph = model->graph();
  const size_t n = graph.nodes.size();
  NodeCosts costs;
  costs.seconds.assign(n, 1.0);
  costs.value_bytes.assign(graph.values.size(), 100);
  // Each layer reads one 8 x 8 float32 weight: 256 bytes.
  const size_t layer = 8 * 8 * sizeof(float);
  ASSERT_EQ(n, 20u);
  absl::StatusOr<std::vector<std::string>> fit =
      BalancedContexts(graph, costs, {"dev0", "dev1"}, 12 * layer);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_THAT(Cuts(*fit), ::testing::ElementsAre(10u));  // 10 + 10 layers: both fit.
  fit = BalancedContexts(graph, costs, {"dev0", "dev1"}, 11 * layer);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_THAT(Cuts(*fit), ::testing::ElementsAre(10u));
  costs.seconds.assign(n, 1.0);
  costs.seconds[n - 1] = 20;  // The balance alone would put 19 layers first.
  fit = BalancedContexts(graph, costs, {"dev0", "dev1"}, 12 * layer);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_THAT(Cuts(*fit), ::testing::ElementsAre(12u));  // As late as 12 layers fit.
  absl::StatusOr<std::vector<std::string>> none =
      BalancedContexts(graph, costs, {"dev0", "dev1"}, 9 * layer);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(none.status().message()), ::testing::HasSubstr("context 'dev1'"));
}

}  // namespace
}  // namespace replicad
