#ifndef REPLICAD_CORE_MODEL_GRAPH_REWRITE_H_
#define REPLICAD_CORE_MODEL_GRAPH_REWRITE_H_

#include <set>
#include <string>
#include <vector>

#include "core/model/graph.h"

namespace replicad {

// What the load-time rewrites (graph_optimizer.h, attention_fusion.h) ask of
// a graph while they change it.

// Readers of each value (node indices); rebuild after every rewrite pass.
std::vector<std::vector<int>> Readers(const Graph& graph);

// The node writing each value, -1 for inputs and initializers; rebuild
// after every rewrite pass.
std::vector<int> Producers(const Graph& graph);

bool IsGraphOutput(const Graph& graph, int v);

// `v` feeds exactly one node and nothing else sees it.
bool PrivateValue(const Graph& graph, const std::vector<std::vector<int>>& readers, int v);

// The initializer's value, or nullptr where `v` is none.
const Tensor* Initializer(const Graph& graph, int v);

// Drops the nodes whose indices `dead` holds, keeping the others' order.
void RemoveNodes(Graph* graph, const std::set<int>& dead);

// A new value holding `value`, as an initializer; its index.
int AddInitializer(Graph* graph, const std::string& name, Tensor value);

// The node reading `v` with op `op_type` and one output, when `v` has that
// reader among `count` readers and is not a graph output; else -1.
int ReaderOf(const Graph& graph, const std::vector<std::vector<int>>& readers, int v,
             const char* op_type, size_t count);

// For binary `node` reading `v`: its other input (-1 where it has not two).
int OtherInput(const Node& node, int v);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_GRAPH_REWRITE_H_
