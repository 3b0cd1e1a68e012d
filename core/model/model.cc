#include "core/model/model.h"

#include "core/model/row_mixing.h"
#include "core/model/weight_file.h"

namespace replicad {
namespace {

int FindByName(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

Model::Model(std::string name, std::string source, Graph graph)
    : name_(std::move(name)), source_(std::move(source)), graph_(std::move(graph)) {
  for (int v : graph_.inputs) inputs_.push_back({graph_.values[v].name, graph_.values[v].type});
  for (int v : graph_.outputs) outputs_.push_back({graph_.values[v].name, graph_.values[v].type});
  row_mixing_ = RowMixingNode(graph_);
}

Model::Model(std::string name, std::string source, Graph graph,
             std::shared_ptr<const WeightFile> weight_file)
    : Model(std::move(name), std::move(source), std::move(graph)) {
  weight_file_ = std::move(weight_file);
}

void Model::ReleaseResidentWeights() const {
  if (weight_file_ != nullptr) weight_file_->ReleaseResidentPages();
}

int Model::InputIndex(const std::string& name) const { return FindByName(inputs_, name); }
int Model::OutputIndex(const std::string& name) const { return FindByName(outputs_, name); }

}  // namespace replicad
