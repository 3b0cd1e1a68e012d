#ifndef REPLICAD_CORE_MODEL_MODEL_H_
#define REPLICAD_CORE_MODEL_MODEL_H_

#include <string>
#include <vector>

#include "core/model/graph.h"

namespace replicad {

// A named input or output of a model: dtype and shape, kAnyDim where open.
struct TensorSpec {
  std::string name;
  TensorType type;
};

// A loaded model: the CPU-resident template (graph and initial weights) that
// every replica copies. Immutable; share it as std::shared_ptr<const Model>.
class Model {
 public:
  Model(std::string name, std::string source, Graph graph);

  const std::string& name() const { return name_; }
  // The file it came from, or "<embedded>".
  const std::string& source() const { return source_; }
  const Graph& graph() const { return graph_; }
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  // Index of the input or output called `name`, or -1.
  int InputIndex(const std::string& name) const;
  int OutputIndex(const std::string& name) const;

 private:
  std::string name_;
  std::string source_;
  Graph graph_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_MODEL_H_
