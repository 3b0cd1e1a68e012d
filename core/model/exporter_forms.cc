#include "core/model/exporter_forms.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace replicad {
namespace {

// How many nodes read each value, plus one for a graph output.
std::map<std::string, int> Readers(const onnx::GraphProto& graph) {
  std::map<std::string, int> readers;
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& input : node.input()) ++readers[input];
  }
  for (const onnx::ValueInfoProto& output : graph.output()) ++readers[output.name()];
  return readers;
}

// True when the bool scalar `name` is a Constant node's output or an
// initializer; `*value` is it.
bool ConstantBool(const onnx::GraphProto& graph, const std::string& name, bool* value) {
  auto read = [&](const onnx::TensorProto& t) {
    if (t.data_type() != onnx::TensorProto::BOOL) return false;
    if (!t.raw_data().empty()) {
      *value = t.raw_data()[0] != 0;
    } else if (t.int32_data_size() > 0) {
      *value = t.int32_data(0) != 0;
    } else {
      return false;
    }
    return true;
  };
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() != "Constant" || node.output_size() != 1 || node.output(0) != name) continue;
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.name() == "value" && a.has_t()) return read(a.t());
    }
  }
  for (const onnx::TensorProto& t : graph.initializer()) {
    if (t.name() == name) return read(t);
  }
  return false;
}

void MarkTraining(onnx::NodeProto* node) {
  onnx::AttributeProto* mark = node->add_attribute();
  mark->set_name(kTrainingAttribute);
  mark->set_type(onnx::AttributeProto::INT);
  mark->set_i(1);
}

bool RemoveAttribute(onnx::NodeProto* node, const std::string& name, int64_t* value) {
  auto* attributes = node->mutable_attribute();
  for (int i = 0; i < attributes->size(); ++i) {
    if (attributes->Get(i).name() == name) {
      *value = attributes->Get(i).i();
      attributes->DeleteSubrange(i, 1);
      return true;
    }
  }
  return false;
}

}  // namespace

void NormalizeTrainingForms(onnx::GraphProto* graph) {
  std::map<std::string, int> readers = Readers(*graph);
  auto unread_beyond_first = [&](const onnx::NodeProto& node) {
    for (int o = 1; o < node.output_size(); ++o) {
      if (!node.output(o).empty() && readers[node.output(o)] > 0) return false;
    }
    return true;
  };
  std::set<std::string> dropped_flags;
  for (onnx::NodeProto& node : *graph->mutable_node()) {
    if (node.op_type() == "BatchNormalization") {
      int64_t training_mode = 0;
      bool has_attribute = false;
      for (const onnx::AttributeProto& a : node.attribute()) {
        if (a.name() == "training_mode") {
          has_attribute = true;
          training_mode = a.i();
        }
      }
      const bool training = node.output_size() > 1 || (has_attribute && training_mode != 0);
      if (!training || !unread_beyond_first(node)) continue;
      RemoveAttribute(&node, "training_mode", &training_mode);
      node.mutable_output()->DeleteSubrange(1, node.output_size() - 1);
      MarkTraining(&node);
    } else if (node.op_type() == "Dropout" && node.input_size() == 3) {
      bool training = false;
      if (!ConstantBool(*graph, node.input(2), &training) || !unread_beyond_first(node)) continue;
      --readers[node.input(2)];
      dropped_flags.insert(node.input(2));
      node.mutable_input()->DeleteSubrange(2, 1);
      if (node.output_size() > 1) node.mutable_output()->DeleteSubrange(1, node.output_size() - 1);
      if (training) MarkTraining(&node);
    }
  }
  // The bool Constants nothing reads any more.
  auto* nodes = graph->mutable_node();
  for (int i = nodes->size() - 1; i >= 0; --i) {
    const onnx::NodeProto& node = nodes->Get(i);
    if (node.op_type() == "Constant" && node.output_size() == 1 &&
        dropped_flags.count(node.output(0)) && readers[node.output(0)] == 0) {
      nodes->DeleteSubrange(i, 1);
    }
  }
}

void NarrowDoubleConstantsCastToFloat(onnx::GraphProto* graph) {
  std::map<std::string, bool> only_cast_to_float;  // By value name.
  for (const onnx::NodeProto& node : graph->node()) {
    for (const std::string& input : node.input()) {
      bool cast_to_float = false;
      if (node.op_type() == "Cast") {
        for (const onnx::AttributeProto& a : node.attribute()) {
          cast_to_float = cast_to_float || (a.name() == "to" && a.i() == onnx::TensorProto::FLOAT);
        }
      }
      auto [it, inserted] = only_cast_to_float.emplace(input, cast_to_float);
      if (!inserted) it->second = it->second && cast_to_float;
    }
  }
  for (const onnx::ValueInfoProto& output : graph->output())
    only_cast_to_float[output.name()] = false;
  for (onnx::NodeProto& node : *graph->mutable_node()) {
    if (node.op_type() != "Constant" || node.output_size() != 1) continue;
    auto it = only_cast_to_float.find(node.output(0));
    if (it == only_cast_to_float.end() || !it->second) continue;
    for (onnx::AttributeProto& a : *node.mutable_attribute()) {
      if (a.name() != "value" || !a.has_t() || a.t().data_type() != onnx::TensorProto::DOUBLE) {
        continue;
      }
      onnx::TensorProto* t = a.mutable_t();
      std::vector<double> values(t->double_data().begin(), t->double_data().end());
      if (values.empty() && !t->raw_data().empty()) {
        values.resize(t->raw_data().size() / sizeof(double));
        std::memcpy(values.data(), t->raw_data().data(), values.size() * sizeof(double));
      }
      t->clear_double_data();
      t->clear_raw_data();
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (double v : values) t->add_float_data(static_cast<float>(v));
    }
  }
}

}  // namespace replicad
