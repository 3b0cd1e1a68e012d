#ifndef REPLICAD_CORE_MODEL_GRAPH_NAMES_H_
#define REPLICAD_CORE_MODEL_GRAPH_NAMES_H_

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// Names for the values and nodes an import pass adds to an ONNX graph, none
// of them one the graph already uses (its initializers, inputs and node
// outputs) or one handed out before.
class FreshGraphNames {
 public:
  explicit FreshGraphNames(const onnx::GraphProto& graph) {
    for (const auto& init : graph.initializer()) taken_.insert(init.name());
    for (const auto& input : graph.input()) taken_.insert(input.name());
    for (const auto& node : graph.node()) taken_.insert(node.output().begin(), node.output().end());
  }

  // `base`, or `base`_1, `base`_2, ... : the first that is free.
  std::string Make(const std::string& base) {
    std::string name = base;
    for (int n = 1; taken_.count(name) != 0; ++n) name = absl::StrCat(base, "_", n);
    taken_.insert(name);
    return name;
  }

 private:
  std::set<std::string> taken_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_GRAPH_NAMES_H_
