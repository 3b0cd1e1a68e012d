#include "core/model/quantized_contrib_ops.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/model/graph_names.h"

namespace replicad {
namespace {

constexpr char kContribDomain[] = "com.microsoft";

class Expander {
 public:
  explicit Expander(onnx::GraphProto* graph) : graph_(graph), names_(*graph) {}

  absl::Status Run() {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (onnx::NodeProto& node : *graph_->mutable_node()) {
      if (node.domain() != kContribDomain) {
        *nodes.Add() = std::move(node);
        continue;
      }
      absl::StatusOr<bool> expanded = Expand(node, &nodes);
      if (!expanded.ok()) return expanded.status();
      if (!*expanded) *nodes.Add() = std::move(node);
    }
    graph_->mutable_node()->Swap(&nodes);
    return absl::OkStatus();
  }

 private:
  using Nodes = google::protobuf::RepeatedPtrField<onnx::NodeProto>;

  // The node's QDQ form appended to `out`; false where it has none here.
  absl::StatusOr<bool> Expand(const onnx::NodeProto& node, Nodes* out) {
    const std::string& op = node.op_type();
    if (op == "QLinearAdd" || op == "QLinearMul") {
      if (node.attribute_size() != 0) return false;
      if (node.input_size() < 7) return TooFewInputs(node, 7);
      const std::string a = Dequantize(node, 0, out), b = Dequantize(node, 3, out);
      const std::string sum = Fresh(node.output(0) + "/float");
      Add(op == "QLinearAdd" ? "Add" : "Mul", node.name(), {a, b}, {sum}, out);
      Quantize(node, sum, 6, out);
      return true;
    }
    if (op == "QLinearGlobalAveragePool") {
      for (const onnx::AttributeProto& a : node.attribute()) {
        if (a.name() != "channels_last" || a.i() != 0) return false;
      }
      if (node.input_size() < 5) return TooFewInputs(node, 5);
      const std::string x = Dequantize(node, 0, out);
      const std::string pooled = Fresh(node.output(0) + "/float");
      Add("GlobalAveragePool", node.name(), {x}, {pooled}, out);
      Quantize(node, pooled, 3, out);
      return true;
    }
    if (op == "QGemm") return ExpandQGemm(node, out);
    return false;
  }

  absl::StatusOr<bool> ExpandQGemm(const onnx::NodeProto& node, Nodes* out) {
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.name() != "alpha" && a.name() != "transA" && a.name() != "transB") return false;
    }
    if (node.input_size() < 6) return TooFewInputs(node, 6);
    // B's scale may be per output column: B's dim 0 with transB, else dim 1.
    bool trans_b = false;
    for (const onnx::AttributeProto& a : node.attribute())
      trans_b |= a.name() == "transB" && a.i() != 0;
    const std::string a = Dequantize(node, 0, out), b = Dequantize(node, 3, out, trans_b ? 0 : 1);
    std::vector<std::string> inputs = {a, b};
    if (node.input_size() > 6 && !node.input(6).empty()) {
      // C is int32 with scale a_scale * b_scale and zero point 0.
      const std::string scale = Fresh(node.output(0) + "/bias_scale");
      Add("Mul", node.name() + "/bias_scale", {node.input(1), node.input(4)}, {scale}, out);
      inputs.push_back(Fresh(node.output(0) + "/bias"));
      onnx::NodeProto* bias = Add("DequantizeLinear", node.name() + "/bias", {node.input(6), scale},
                                  {inputs.back()}, out);
      SetAxis(bias, 0);
    }
    const bool quantized = node.input_size() > 7 && !node.input(7).empty();
    const std::string product = quantized ? Fresh(node.output(0) + "/float") : node.output(0);
    onnx::NodeProto* gemm = Add("Gemm", node.name(), inputs, {product}, out);
    *gemm->mutable_attribute() = node.attribute();
    if (quantized) Quantize(node, product, 7, out);
    return true;
  }

  // DequantizeLinear of the node's input `at` with the scale and zero point
  // after it (per `axis` where the scale has one value per index of it).
  std::string Dequantize(const onnx::NodeProto& node, int at, Nodes* out, int64_t axis = 1) {
    const std::string value = Fresh(node.input(at) + "/dequantized");
    onnx::NodeProto* dq =
        Add("DequantizeLinear", node.name() + "/" + node.input(at),
            {node.input(at), node.input(at + 1), node.input(at + 2)}, {value}, out);
    if (axis != 1) SetAxis(dq, axis);
    return value;
  }

  static void SetAxis(onnx::NodeProto* node, int64_t axis) {
    onnx::AttributeProto* attribute = node->add_attribute();
    attribute->set_name("axis");
    attribute->set_type(onnx::AttributeProto::INT);
    attribute->set_i(axis);
  }

  // QuantizeLinear of `value` into the node's output with the scale and
  // zero point at inputs `at` and `at` + 1 (the zero point may be left out).
  void Quantize(const onnx::NodeProto& node, const std::string& value, int at, Nodes* out) {
    std::vector<std::string> inputs = {value, node.input(at)};
    if (node.input_size() > at + 1 && !node.input(at + 1).empty())
      inputs.push_back(node.input(at + 1));
    Add("QuantizeLinear", node.name() + "/quantize", inputs, {node.output(0)}, out);
  }

  onnx::NodeProto* Add(const std::string& op, const std::string& name,
                       const std::vector<std::string>& inputs,
                       const std::vector<std::string>& outputs, Nodes* out) {
    onnx::NodeProto* node = out->Add();
    node->set_op_type(op);
    node->set_name(name);
    for (const std::string& input : inputs) node->add_input(input);
    for (const std::string& output : outputs) node->add_output(output);
    return node;
  }

  static absl::Status TooFewInputs(const onnx::NodeProto& node, int count) {
    return absl::InvalidArgumentError(absl::StrCat(kContribDomain, "::", node.op_type(), " node '",
                                                   node.name(), "' must have at least ", count,
                                                   " inputs, received ", node.input_size()));
  }

  std::string Fresh(const std::string& base) { return names_.Make(base); }

  onnx::GraphProto* graph_;
  FreshGraphNames names_;
};

}  // namespace

absl::Status ExpandQuantizedContribOps(onnx::GraphProto* graph) { return Expander(graph).Run(); }

}  // namespace replicad
