#include "core/model/one_d_windows.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/graph_names.h"

namespace replicad {
namespace {

bool IsWindowOp(const onnx::NodeProto& node) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") return false;
  const std::string& op = node.op_type();
  return op == "Conv" || op == "ConvTranspose" || op == "MaxPool" || op == "AveragePool";
}

bool HasWeights(const onnx::NodeProto& node) {
  return node.op_type() == "Conv" || node.op_type() == "ConvTranspose";
}

bool IsOneDimensional(const onnx::NodeProto& node, const std::map<std::string, int>& ranks) {
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (a.name() == "kernel_shape") return a.ints_size() == 1;
  }
  auto rank_of = [&](int input) {
    if (input >= node.input_size()) return -1;
    auto it = ranks.find(node.input(input));
    return it == ranks.end() ? -1 : it->second;
  };
  if (HasWeights(node) && rank_of(1) >= 0) return rank_of(1) == 3;
  return rank_of(0) == 3;
}

// The 2-D form of a window attribute: a leading 1 (sizes) or 0
// (output_padding, pads).
void Widen(onnx::AttributeProto* a) {
  const std::string& name = a->name();
  const bool sizes =
      name == "kernel_shape" || name == "strides" || name == "dilations" || name == "output_shape";
  if (!sizes && name != "pads" && name != "output_padding") return;
  std::vector<int64_t> values(a->ints().begin(), a->ints().end());
  a->clear_ints();
  if (sizes || name == "output_padding") {
    a->add_ints(sizes ? 1 : 0);
    for (int64_t v : values) a->add_ints(v);
    return;
  }
  // pads [begin, end] -> [0, begin, 0, end].
  a->add_ints(0);
  if (!values.empty()) a->add_ints(values[0]);
  a->add_ints(0);
  if (values.size() > 1) a->add_ints(values[1]);
}

class Lifter {
 public:
  Lifter(onnx::GraphProto* graph, int opset) : graph_(graph), opset_(opset), names_(*graph) {}

  // Appends the lifted form of `node` to `out`.
  void Lift(onnx::NodeProto node, google::protobuf::RepeatedPtrField<onnx::NodeProto>* out) {
    const int lifted_inputs = HasWeights(node) ? std::min(node.input_size(), 2) : 1;
    for (int i = 0; i < lifted_inputs; ++i) {
      if (node.input(i).empty()) continue;
      const std::string wide = FreshName(node.input(i) + "/2d");
      *out->Add() = AxisNode("Unsqueeze", node.input(i), wide);
      node.set_input(i, wide);
    }
    for (onnx::AttributeProto& a : *node.mutable_attribute()) Widen(&a);
    const std::string narrow = node.output(0);
    const std::string wide = FreshName(narrow + "/2d");
    node.set_output(0, wide);
    *out->Add() = std::move(node);
    *out->Add() = AxisNode("Squeeze", wide, narrow);
  }

 private:
  std::string FreshName(const std::string& base) { return names_.Make(base); }

  // Unsqueeze or Squeeze of `from` along axis 2.
  onnx::NodeProto AxisNode(const std::string& op, const std::string& from, const std::string& to) {
    onnx::NodeProto node;
    node.set_op_type(op);
    node.set_name(FreshName(to + "/" + op));
    node.add_input(from);
    node.add_output(to);
    if (opset_ >= 13) {
      node.add_input(AxisInitializer());
    } else {
      onnx::AttributeProto* axes = node.add_attribute();
      axes->set_name("axes");
      axes->set_type(onnx::AttributeProto::INTS);
      axes->add_ints(2);
    }
    return node;
  }

  // The int64 [1] initializer {2} the axes inputs share.
  const std::string& AxisInitializer() {
    if (axis_name_.empty()) {
      axis_name_ = FreshName("replicad.one_d_windows.axis2");
      onnx::TensorProto* axes = graph_->add_initializer();
      axes->set_name(axis_name_);
      axes->set_data_type(onnx::TensorProto::INT64);
      axes->add_dims(1);
      axes->add_int64_data(2);
    }
    return axis_name_;
  }

  onnx::GraphProto* graph_;
  int opset_;
  FreshGraphNames names_;
  std::string axis_name_;
};

}  // namespace

void LiftOneDimensionalWindows(onnx::GraphProto* graph, int opset,
                               const std::map<std::string, int>& ranks) {
  bool any = false;
  for (const onnx::NodeProto& node : graph->node()) {
    any |= IsWindowOp(node) && node.output_size() == 1 && IsOneDimensional(node, ranks);
  }
  if (!any) return;
  Lifter lifter(graph, opset);
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  nodes.Swap(graph->mutable_node());
  for (onnx::NodeProto& node : nodes) {
    if (IsWindowOp(node) && node.output_size() == 1 && node.input_size() >= 1 &&
        IsOneDimensional(node, ranks)) {
      lifter.Lift(std::move(node), graph->mutable_node());
    } else {
      graph->mutable_node()->Add(std::move(node));
    }
  }
}

}  // namespace replicad
