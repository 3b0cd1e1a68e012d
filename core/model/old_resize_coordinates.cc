#include "core/model/old_resize_coordinates.h"

namespace replicad {

std::set<std::string> OldResizeOutputs(const onnx::GraphProto& g) {
  std::set<std::string> outputs;
  for (const onnx::NodeProto& node : g.node()) {
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    if (default_domain && (node.op_type() == "Upsample" || node.op_type() == "Resize") &&
        node.output_size() > 0) {
      outputs.insert(node.output(0));
    }
  }
  return outputs;
}

void KeepOldResizeCoordinates(onnx::GraphProto* g, const std::set<std::string>& outputs) {
  for (onnx::NodeProto& node : *g->mutable_node()) {
    if (node.op_type() != "Resize" || node.output_size() == 0 || !outputs.count(node.output(0))) {
      continue;
    }
    bool has_transform = false, has_nearest = false;
    for (const onnx::AttributeProto& a : node.attribute()) {
      has_transform |= a.name() == "coordinate_transformation_mode";
      has_nearest |= a.name() == "nearest_mode";
    }
    auto set = [&](const char* name, const char* value) {
      onnx::AttributeProto* a = node.add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(value);
    };
    if (!has_transform) set("coordinate_transformation_mode", "asymmetric");
    if (!has_nearest) set("nearest_mode", "floor");
  }
}

}  // namespace replicad
