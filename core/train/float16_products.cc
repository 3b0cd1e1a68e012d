#include "core/train/float16_products.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/model/compute_precision.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

// ONNX's TensorProto.DataType numbers, Cast's `to`.
constexpr int64_t kOnnxFloat = 1;
constexpr int64_t kOnnxFloat16 = 10;

bool IsProduct(const std::string& op_type) {
  return op_type == "Conv" || op_type == "Gemm" || op_type == "MatMul" ||
         op_type == kConvGradData || op_type == kConvGradFilter;
}

// Builds the rewritten node list of RoundProductsToFloat16.
class Rounding {
 public:
  explicit Rounding(Graph* graph) : graph_(graph) {}

  // `from` rounded through float16 by two Casts appended to `nodes`, guarded
  // as `guards`; the rounded value. `from` itself where a rounding wrote it;
  // made once per value for unguarded readers (a guarded reader's value
  // exists only where its guards hold).
  int Rounded(int from, const std::vector<Guard>& guards, std::vector<Node>* nodes) {
    if (representable_.count(from) > 0) return from;
    auto it = rounded_.find(from);
    if (guards.empty() && it != rounded_.end()) return it->second;
    const int to = NewValue(absl::StrCat(graph_->values[from].name, "/fp16"), DType::kFloat32);
    AppendRound(from, to, guards, nodes);
    if (guards.empty()) rounded_.emplace(from, to);
    return to;
  }

  // Two Casts appended to `nodes`: `from` to float16, and back into `to`.
  void AppendRound(int from, int to, const std::vector<Guard>& guards, std::vector<Node>* nodes) {
    const std::string base = absl::StrCat(graph_->values[to].name, "/round");
    const int half = NewValue(base + ":half", DType::kFloat16);
    nodes->push_back(Cast(base + "_to_half", from, half, kOnnxFloat16, guards));
    nodes->push_back(Cast(base + "_to_float", half, to, kOnnxFloat, guards));
    representable_.insert(to);
  }

  int NewValue(std::string name, DType dtype) {
    graph_->values.push_back(Value{std::move(name), TensorType{dtype, {}}});
    return static_cast<int>(graph_->values.size()) - 1;
  }

 private:
  static Node Cast(std::string name, int from, int to, int64_t type,
                   const std::vector<Guard>& guards) {
    Node node;
    node.name = std::move(name);
    node.op_type = "Cast";
    node.inputs = {from};
    node.outputs = {to};
    node.attributes.Set("to", type);
    node.guards = guards;
    return node;
  }

  Graph* graph_;
  std::map<int, int> rounded_;   // Value -> its rounded copy.
  std::set<int> representable_;  // Values a rounding wrote.
};

bool IsFloat32(const Graph& graph, int value) {
  return value >= 0 && graph.values[value].type.dtype == DType::kFloat32;
}

}  // namespace

std::vector<int> Float16Products(const TrainingGraph& training, const std::vector<int>& origins) {
  const Graph& graph = training.graph;
  const std::vector<int> forward =
      WeightProducts(graph, std::set<int>(training.parameters.begin(), training.parameters.end()),
                     training.first_backward_node);
  std::vector<int> nodes = forward;
  const std::set<int> rounded_forward(forward.begin(), forward.end());
  for (size_t k = 0; k < origins.size(); ++k) {
    const int n = training.first_backward_node + static_cast<int>(k);
    if (rounded_forward.count(origins[k]) > 0 && IsProduct(graph.nodes[n].op_type)) {
      nodes.push_back(n);
    }
  }
  return nodes;
}

void RoundProductsToFloat16(TrainingGraph* training, const std::vector<int>& nodes) {
  Graph& graph = training->graph;
  const std::set<int> rounding(nodes.begin(), nodes.end());
  Rounding rounds(&graph);
  std::vector<Node> rewritten;
  int first_backward_node = training->first_backward_node;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (static_cast<int>(n) == training->first_backward_node) {
      first_backward_node = static_cast<int>(rewritten.size());
    }
    Node node = std::move(graph.nodes[n]);
    if (rounding.count(static_cast<int>(n)) == 0) {
      rewritten.push_back(std::move(node));
      continue;
    }
    for (int& input : node.inputs) {
      if (IsFloat32(graph, input)) input = rounds.Rounded(input, node.guards, &rewritten);
    }
    node.attributes.Set(kPrecisionAttribute, AttributeValue(std::string("fp16")));
    // A forward node writes a copy of each output; the rounding writes the output.
    std::vector<std::pair<int, int>> outputs;
    const bool forward = static_cast<int>(n) < training->first_backward_node;
    for (int& output : node.outputs) {
      if (!forward || !IsFloat32(graph, output)) continue;
      const int exact =
          rounds.NewValue(absl::StrCat(graph.values[output].name, "/exact"), DType::kFloat32);
      outputs.emplace_back(exact, output);
      output = exact;
    }
    const std::vector<Guard> guards = node.guards;
    rewritten.push_back(std::move(node));
    for (const auto& [exact, output] : outputs) {
      rounds.AppendRound(exact, output, guards, &rewritten);
    }
  }
  graph.nodes = std::move(rewritten);
  training->first_backward_node = first_backward_node;
}

void ScaleLossGradient(TrainingGraph* training) {
  Graph& graph = training->graph;
  graph.values.push_back(Value{"loss_scale", TensorType{DType::kFloat32, {}}});
  const int scale = static_cast<int>(graph.values.size()) - 1;
  graph.values.push_back(Value{"loss_gradient/scaled", TensorType{DType::kFloat32, {}}});
  const int scaled = static_cast<int>(graph.values.size()) - 1;
  // Every reader of the seeded gradient is in the backward pass.
  for (size_t n = training->first_backward_node; n < graph.nodes.size(); ++n) {
    for (int& input : graph.nodes[n].inputs) {
      if (input == training->loss_gradient) input = scaled;
    }
  }
  Node multiply;
  multiply.name = "loss_gradient/scale";
  multiply.op_type = "Mul";
  multiply.inputs = {training->loss_gradient, scale};
  multiply.outputs = {scaled};
  graph.nodes.insert(graph.nodes.begin() + training->first_backward_node, std::move(multiply));
  graph.inputs.push_back(scale);
  training->loss_scale_input = scale;
}

}  // namespace replicad
