#include "core/model/half_float_widening.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/model/graph_names.h"
#include "core/tensor/half_float.h"

namespace replicad {
namespace {

bool IsHalfFloat(int data_type) {
  return data_type == onnx::TensorProto::FLOAT16 || data_type == onnx::TensorProto::BFLOAT16;
}

bool IsHalfFloat(const onnx::ValueInfoProto& info) {
  return info.type().has_tensor_type() && IsHalfFloat(info.type().tensor_type().elem_type());
}

void SetFloat(onnx::ValueInfoProto* info) {
  if (IsHalfFloat(*info)) {
    info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
}

// `t`'s values as float32, in place (raw_data holds them: one copy, 4 bytes each).
absl::Status WidenTensor(onnx::TensorProto* t, const std::string& what) {
  if (!IsHalfFloat(t->data_type())) return absl::OkStatus();
  int64_t count = 1;
  for (int64_t d : t->dims()) count *= d;  // CheckTensorData bounded the dims.
  std::vector<uint16_t> bits(static_cast<size_t>(count));
  if (t->has_raw_data()) {
    // CheckTensorData made sure raw_data holds 2 bytes an element.
    std::memcpy(bits.data(), t->raw_data().data(), bits.size() * sizeof(uint16_t));
  } else if (t->int32_data_size() == count) {
    for (int64_t i = 0; i < count; ++i) bits[i] = static_cast<uint16_t>(t->int32_data(i));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", onnx::TensorProto::DataType_Name(t->data_type()), " expected ",
                     count, " values in int32_data or raw_data, received ", t->int32_data_size()));
  }
  const DType dtype = static_cast<DType>(t->data_type());  // DType's values are ONNX's.
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = HalfFloatBitsToFloat(dtype, bits[i]);
  t->clear_int32_data();
  t->set_raw_data(values.data(), values.size() * sizeof(float));
  t->set_data_type(onnx::TensorProto::FLOAT);
  return absl::OkStatus();
}

bool IsDefaultDomain(const onnx::NodeProto& node) {
  return node.domain().empty() || node.domain() == "ai.onnx";
}

// The attributes that name an element type: Cast's `to`, the generators' `dtype`.
bool NamesElementType(const onnx::NodeProto& node, const onnx::AttributeProto& a) {
  if (!IsDefaultDomain(node) || a.type() != onnx::AttributeProto::INT) return false;
  return (a.name() == "to" && node.op_type() == "Cast") || a.name() == "dtype";
}

absl::Status WidenSubgraph(onnx::GraphProto* graph);

absl::Status WidenNode(onnx::NodeProto* node) {
  const std::string name = node->name().empty() ? node->op_type() : node->name();
  for (onnx::AttributeProto& a : *node->mutable_attribute()) {
    const std::string what = absl::StrCat("node '", name, "' attribute '", a.name(), "'");
    if (NamesElementType(*node, a) && IsHalfFloat(static_cast<int>(a.i()))) {
      a.set_i(onnx::TensorProto::FLOAT);
    }
    if (a.has_t()) REPLICAD_RETURN_IF_ERROR(WidenTensor(a.mutable_t(), what));
    for (onnx::TensorProto& t : *a.mutable_tensors()) {
      REPLICAD_RETURN_IF_ERROR(WidenTensor(&t, what));
    }
    if (a.has_g()) REPLICAD_RETURN_IF_ERROR(WidenSubgraph(a.mutable_g()));
    for (onnx::GraphProto& g : *a.mutable_graphs()) {
      REPLICAD_RETURN_IF_ERROR(WidenSubgraph(&g));
    }
  }
  return absl::OkStatus();
}

// Everything inside `graph` to float32, its interface included (a subgraph's
// inputs and outputs are values of the graph around it).
absl::Status WidenSubgraph(onnx::GraphProto* graph) {
  for (onnx::TensorProto& init : *graph->mutable_initializer()) {
    REPLICAD_RETURN_IF_ERROR(WidenTensor(&init, absl::StrCat("initializer '", init.name(), "'")));
  }
  for (onnx::NodeProto& node : *graph->mutable_node()) {
    REPLICAD_RETURN_IF_ERROR(WidenNode(&node));
  }
  for (auto* infos :
       {graph->mutable_input(), graph->mutable_output(), graph->mutable_value_info()}) {
    for (onnx::ValueInfoProto& info : *infos) SetFloat(&info);
  }
  return absl::OkStatus();
}

class Widener {
 public:
  explicit Widener(onnx::GraphProto* graph) : graph_(graph), names_(*graph) {}

  absl::Status Run() {
    std::set<std::string> initializers;
    for (const auto& init : graph_->initializer()) initializers.insert(init.name());
    std::set<std::string> inputs;
    // Inputs: consumers read a float32 copy, made first.
    std::vector<onnx::NodeProto> first;
    for (const onnx::ValueInfoProto& input : graph_->input()) {
      inputs.insert(input.name());
      if (!IsHalfFloat(input) || initializers.count(input.name())) continue;
      const std::string wide = Fresh(input.name() + "/float32");
      renamed_[input.name()] = wide;
      first.push_back(CastNode(input.name(), wide, onnx::TensorProto::FLOAT));
    }
    // Outputs: whatever made them makes a float32 value, cast back last.
    std::vector<onnx::NodeProto> last;
    for (const onnx::ValueInfoProto& output : graph_->output()) {
      if (!IsHalfFloat(output) || inputs.count(output.name())) continue;
      const std::string wide = Fresh(output.name() + "/float32");
      renamed_[output.name()] = wide;
      const int type = output.type().tensor_type().elem_type();
      last.push_back(CastNode(wide, output.name(), type));
      for (onnx::TensorProto& init : *graph_->mutable_initializer()) {
        if (init.name() == output.name()) init.set_name(wide);
      }
    }
    for (onnx::NodeProto& node : *graph_->mutable_node()) {
      for (int i = 0; i < node.input_size(); ++i) Rename(node.mutable_input(i));
      for (int i = 0; i < node.output_size(); ++i) Rename(node.mutable_output(i));
    }
    for (onnx::ValueInfoProto& info : *graph_->mutable_value_info()) Rename(info.mutable_name());
    // The graph's own inputs and outputs keep their names and types; the
    // rest of it goes to float32 (initializers, constants, value_info).
    auto interface_inputs = *graph_->mutable_input();
    auto interface_outputs = *graph_->mutable_output();
    REPLICAD_RETURN_IF_ERROR(WidenSubgraph(graph_));
    *graph_->mutable_input() = interface_inputs;
    *graph_->mutable_output() = interface_outputs;
    for (onnx::ValueInfoProto& input : *graph_->mutable_input()) {
      if (initializers.count(input.name())) SetFloat(&input);  // IR < 4 lists them as inputs.
    }
    Assemble(std::move(first), std::move(last));
    return absl::OkStatus();
  }

 private:
  std::string Fresh(const std::string& base) { return names_.Make(base); }

  void Rename(std::string* name) {
    auto it = renamed_.find(*name);
    if (it != renamed_.end()) *name = it->second;
  }

  onnx::NodeProto CastNode(const std::string& from, const std::string& to, int type) {
    onnx::NodeProto node;
    node.set_op_type("Cast");
    node.set_name(Fresh(to + "/Cast"));
    node.add_input(from);
    node.add_output(to);
    onnx::AttributeProto* a = node.add_attribute();
    a->set_name("to");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(type);
    return node;
  }

  void Assemble(std::vector<onnx::NodeProto> first, std::vector<onnx::NodeProto> last) {
    if (first.empty() && last.empty()) return;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (onnx::NodeProto& node : first) *nodes.Add() = std::move(node);
    for (onnx::NodeProto& node : *graph_->mutable_node()) *nodes.Add() = std::move(node);
    for (onnx::NodeProto& node : last) *nodes.Add() = std::move(node);
    graph_->mutable_node()->Swap(&nodes);
  }

  onnx::GraphProto* graph_;
  FreshGraphNames names_;
  std::map<std::string, std::string> renamed_;
};

}  // namespace

absl::Status WidenHalfFloats(onnx::GraphProto* graph) { return Widener(graph).Run(); }

}  // namespace replicad
