#include "core/model/graph_rewrite.h"

#include <utility>

namespace replicad {

std::vector<std::vector<int>> Readers(const Graph& graph) {
  std::vector<std::vector<int>> readers(graph.values.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int v : graph.nodes[n].inputs) {
      if (v >= 0) readers[v].push_back(static_cast<int>(n));
    }
  }
  return readers;
}

std::vector<int> Producers(const Graph& graph) {
  std::vector<int> producers(graph.values.size(), -1);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int v : graph.nodes[n].outputs) {
      if (v >= 0) producers[v] = static_cast<int>(n);
    }
  }
  return producers;
}

bool IsGraphOutput(const Graph& graph, int v) {
  for (int o : graph.outputs) {
    if (o == v) return true;
  }
  return false;
}

bool PrivateValue(const Graph& graph, const std::vector<std::vector<int>>& readers, int v) {
  return readers[v].size() == 1 && !IsGraphOutput(graph, v);
}

const Tensor* Initializer(const Graph& graph, int v) {
  auto it = graph.initializers.find(v);
  return it == graph.initializers.end() ? nullptr : &it->second;
}

void RemoveNodes(Graph* graph, const std::set<int>& dead) {
  std::vector<Node> kept;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    if (!dead.count(static_cast<int>(n))) kept.push_back(std::move(graph->nodes[n]));
  }
  graph->nodes = std::move(kept);
}

int AddInitializer(Graph* graph, const std::string& name, Tensor value) {
  const int v = static_cast<int>(graph->values.size());
  graph->values.push_back(Value{name, value.type()});
  graph->initializers[v] = std::move(value);
  return v;
}

int ReaderOf(const Graph& graph, const std::vector<std::vector<int>>& readers, int v,
             const char* op_type, size_t count) {
  if (readers[v].size() != count || IsGraphOutput(graph, v)) return -1;
  for (int r : readers[v]) {
    const Node& node = graph.nodes[r];
    if (node.op_type == op_type && node.outputs.size() == 1) return r;
  }
  return -1;
}

int OtherInput(const Node& node, int v) {
  if (node.inputs.size() != 2) return -1;
  if (node.inputs[0] == v) return node.inputs[1];
  return node.inputs[1] == v ? node.inputs[0] : -1;
}

}  // namespace replicad
