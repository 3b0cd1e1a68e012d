#ifndef REPLICAD_CORE_MODEL_GRAPH_H_
#define REPLICAD_CORE_MODEL_GRAPH_H_

#include <map>
#include <string>
#include <vector>

#include "core/tensor/attributes.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace replicad {

// A value flowing through the graph. In `type.shape`, kAnyDim marks a
// dimension the model leaves open (the batch dimension of an input). For
// intermediate values the type is what ONNX's shape inference found (an
// empty shape where it found none); plans infer concrete shapes themselves.
struct Value {
  std::string name;
  TensorType type;
};

// A condition a node runs under: it runs only where value `condition` (a
// bool of one element) holds `branch`. An If's branches become guarded nodes
// (if_branches.h).
struct Guard {
  int condition;
  bool branch;
};

// One operator application. Inputs index Graph::values; kAbsentInput stands
// for an optional input the model leaves out.
struct Node {
  static constexpr int kAbsentInput = -1;

  std::string name;
  std::string op_type;
  std::vector<int> inputs;
  std::vector<int> outputs;
  Attributes attributes;
  // Empty for a node that always runs. A node of a nested If's branch has a
  // guard per If; one whose condition was never computed (its own branch
  // was not taken) counts as not holding.
  std::vector<Guard> guards;
};

// The engine's graph IR: nodes in topological order over indexed values.
// Immutable once built; shared by every replica and plan of a model.
struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;   // Values the caller feeds (initializers excluded).
  std::vector<int> outputs;  // Values the caller receives.
  // The template's weights, in host memory, by value index.
  std::map<int, Tensor> initializers;
  int opset = 0;  // Opset of the default ONNX domain.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_GRAPH_H_
