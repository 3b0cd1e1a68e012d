// Which nodes MarkComputePrecision lets write 16-bit values
// (core/model/compute_precision.h's kOutputPrecisionAttribute), on graphs
// built by hand: chains of weight convolutions, a MaxPool between two of
// them (resnet's stem), a pool read by anything but such convolutions, a
// pool whose windows a backend would not pool alike (ceil rounding,
// one-sided pads, dilation, an Indices output), a pool of pools, and a graph
// output. fp32 and tf32 mark none.

#include "core/model/compute_precision.h"

#include <string>
#include <vector>

#include "core/model/graph.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

// A graph built node by node: values by name, convolutions against their
// own weight initializers.
class GraphBuilder {
 public:
  GraphBuilder() { graph_.inputs.push_back(Value("x")); }

  int Value(const std::string& name) {
    for (size_t v = 0; v < graph_.values.size(); ++v) {
      if (graph_.values[v].name == name) return static_cast<int>(v);
    }
    graph_.values.push_back({name, TensorType{DType::kFloat32, {}}});
    return static_cast<int>(graph_.values.size() - 1);
  }

  Node& Conv(const std::string& name, const std::string& x, const std::string& y) {
    const int w = Value(name + "_w");
    graph_.initializers.emplace(w, Tensor::Host(DType::kFloat32, {4, 4, 1, 1}));
    return Add(name, "Conv", {Value(x), w}, {Value(y)});
  }

  Node& MaxPool(const std::string& name, const std::string& x, const std::string& y) {
    Node& node = Add(name, "MaxPool", {Value(x)}, {Value(y)});
    node.attributes.Set("kernel_shape", std::vector<int64_t>{3, 3});
    node.attributes.Set("strides", std::vector<int64_t>{2, 2});
    node.attributes.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
    return node;
  }

  Node& Add(const std::string& name, const std::string& op, std::vector<int> inputs,
            std::vector<int> outputs) {
    graph_.nodes.push_back(Node{name, op, std::move(inputs), std::move(outputs), {}, {}});
    return graph_.nodes.back();
  }

  void Output(const std::string& name) { graph_.outputs.push_back(Value(name)); }

  // The names of the nodes marked to write 16 bits under `precision`.
  std::vector<std::string> Writing(ComputePrecision precision) {
    Graph graph = graph_;
    MarkComputePrecision(&graph, precision);
    std::vector<std::string> names;
    for (const Node& node : graph.nodes) {
      absl::StatusOr<std::string> output = node.attributes.GetString(kOutputPrecisionAttribute, "");
      if (output.ok() && !output->empty()) {
        EXPECT_EQ(*output, ComputePrecisionName(precision)) << node.name;
        names.push_back(node.name);
      }
    }
    return names;
  }

 private:
  Graph graph_;
};

using Names = std::vector<std::string>;

// conv1 -> pool -> conv2 -> conv3 -> GlobalAveragePool -> y
GraphBuilder Stem() {
  GraphBuilder g;
  g.Conv("conv1", "x", "a");
  g.MaxPool("pool", "a", "b");
  g.Conv("conv2", "b", "c");
  g.Conv("conv3", "c", "d");
  g.Add("gap", "GlobalAveragePool", {g.Value("d")}, {g.Value("y")});
  g.Output("y");
  return g;
}

TEST(ComputePrecisionTest, AMaxPoolBetweenConvolutionsPassesSixteenBits) {
  GraphBuilder g = Stem();
  EXPECT_EQ(g.Writing(ComputePrecision::kBFloat16), (Names{"conv1", "pool", "conv2"}));
  EXPECT_EQ(g.Writing(ComputePrecision::kFloat16), (Names{"conv1", "pool", "conv2"}));
  EXPECT_EQ(g.Writing(ComputePrecision::kFloat32), Names{});
  EXPECT_EQ(g.Writing(ComputePrecision::kTensorFloat32), Names{});
}

TEST(ComputePrecisionTest, APoolReadByAnythingElseKeepsItsInputFloat32) {
  GraphBuilder g = Stem();
  g.Add("relu", "Relu", {g.Value("b")}, {g.Value("r")});  // The pool's output, read by a Relu.
  g.Output("r");
  EXPECT_EQ(g.Writing(ComputePrecision::kBFloat16), (Names{"conv2"}));

  GraphBuilder to_gap;
  to_gap.Conv("conv", "x", "a");
  to_gap.MaxPool("pool", "a", "b");
  to_gap.Add("gap", "GlobalAveragePool", {to_gap.Value("b")}, {to_gap.Value("y")});
  to_gap.Output("y");
  EXPECT_EQ(to_gap.Writing(ComputePrecision::kFloat16), Names{});
}

TEST(ComputePrecisionTest, PoolsOfPoolsAndFanOutToConvolutions) {
  GraphBuilder g;
  g.Conv("conv1", "x", "a");
  g.MaxPool("pool1", "a", "b");
  g.MaxPool("pool2", "b", "c");
  g.Conv("conv2", "c", "d");
  g.Conv("conv3", "c", "e");  // Two readers of one pool, both convolutions.
  g.Add("sum", "Add", {g.Value("d"), g.Value("e")}, {g.Value("y")});
  g.Output("y");
  EXPECT_EQ(g.Writing(ComputePrecision::kBFloat16), (Names{"conv1", "pool1", "pool2"}));
}

TEST(ComputePrecisionTest, PoolsBackendsWouldNotPoolAlikeBreakTheChain) {
  const auto with = [](const std::string& attribute, std::vector<int64_t> value) {
    GraphBuilder h;
    h.Conv("conv1", "x", "a");
    h.MaxPool("pool", "a", "b").attributes.Set(attribute, std::move(value));
    h.Conv("conv2", "b", "c");
    h.Add("gap", "GlobalAveragePool", {h.Value("c")}, {h.Value("y")});
    h.Output("y");
    return h.Writing(ComputePrecision::kFloat16);
  };
  EXPECT_EQ(with("ceil_mode", {1}), Names{});
  EXPECT_EQ(with("pads", {0, 0, 1, 1}), Names{});
  EXPECT_EQ(with("dilations", {2, 2}), Names{});
  EXPECT_EQ(with("kernel_shape", {3, 3, 3}), Names{});
  EXPECT_EQ(with("pads", {1, 1, 1, 1}), (Names{"conv1", "pool"}));

  GraphBuilder indices;
  indices.Conv("conv1", "x", "a");
  Node& pool = indices.MaxPool("pool", "a", "b");
  pool.outputs.push_back(indices.Value("i"));
  indices.Conv("conv2", "b", "c");
  indices.Output("c");
  indices.Output("i");
  EXPECT_EQ(indices.Writing(ComputePrecision::kBFloat16), Names{});
}

TEST(ComputePrecisionTest, AGraphOutputStaysFloat32) {
  GraphBuilder g;
  g.Conv("conv1", "x", "a");
  g.MaxPool("pool", "a", "b");
  g.Conv("conv2", "b", "c");
  g.Output("b");  // The pool's output is also answered.
  g.Output("c");
  EXPECT_EQ(g.Writing(ComputePrecision::kBFloat16), Names{});
}

}  // namespace
}  // namespace replicad
