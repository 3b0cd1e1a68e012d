#ifndef REPLICAD_CORE_MODEL_MODEL_H_
#define REPLICAD_CORE_MODEL_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "core/model/graph.h"

namespace replicad {

class WeightFile;

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
  // With `weight_file` holding initializers' bytes (see weight_file.h).
  Model(std::string name, std::string source, Graph graph,
        std::shared_ptr<const WeightFile> weight_file);

  const std::string& name() const { return name_; }
  // The file it came from, or "<embedded>".
  const std::string& source() const { return source_; }
  const Graph& graph() const { return graph_; }
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  // The first node that mixes the rows of a batch (row_mixing.h), "" when
  // each row is computed on its own. A model that mixes them runs every
  // request alone and whole: not fused with others, not split over slots,
  // not cut into chunks.
  const std::string& row_mixing() const { return row_mixing_; }
  // Index of the input or output called `name`, or -1.
  int InputIndex(const std::string& name) const;
  int OutputIndex(const std::string& name) const;
  // Lets the weights kept in a WeightFile leave resident memory (after the
  // replicas are built and warm); no-op without one. Reads bring them back.
  void ReleaseResidentWeights() const;

 private:
  std::string name_;
  std::string source_;
  Graph graph_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
  std::string row_mixing_;
  std::shared_ptr<const WeightFile> weight_file_;  // Null: weights in anonymous memory.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_MODEL_H_
