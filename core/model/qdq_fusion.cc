#include "core/model/qdq_fusion.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "core/model/graph_rewrite.h"

namespace replicad {
namespace {

// The node writing `v` when it is `op_type`, else -1.
int ProducerOf(const Graph& graph, const std::vector<int>& producers, int v, const char* op_type) {
  if (v < 0 || producers[v] < 0) return -1;
  return graph.nodes[producers[v]].op_type == op_type ? producers[v] : -1;
}

// A DequantizeLinear or QuantizeLinear whose scale and zero point (if any)
// are initializers with one value, or with `channels` values along
// `channel_axis` where `channels` > 1.
bool ConstantParameters(const Graph& graph, const Node& node, int64_t channels,
                        int64_t channel_axis) {
  if (node.inputs.size() < 2) return false;
  const Tensor* scale = Initializer(graph, node.inputs[1]);
  if (scale == nullptr || scale->dtype() != DType::kFloat32) return false;
  const bool has_zero_point = node.inputs.size() > 2 && node.inputs[2] != Node::kAbsentInput;
  const Tensor* zero_point = has_zero_point ? Initializer(graph, node.inputs[2]) : nullptr;
  if (has_zero_point &&
      (zero_point == nullptr || zero_point->num_elements() != scale->num_elements())) {
    return false;
  }
  if (scale->num_elements() == 1) return true;
  if (channels <= 1 || scale->num_elements() != channels || scale->rank() != 1) return false;
  return node.attributes.GetInt("axis", 1).value_or(-1) == channel_axis;
}

bool HasZeroPoint(const Node& node) {
  return node.inputs.size() > 2 && node.inputs[2] != Node::kAbsentInput;
}

int64_t ZeroPointOf(const Graph& graph, const Node& quantize) {
  if (!HasZeroPoint(quantize)) return 0;
  const Tensor* zero_point = Initializer(graph, quantize.inputs[2]);
  return zero_point->dtype() == DType::kInt8 ? zero_point->data<int8_t>()[0]
                                             : zero_point->data<uint8_t>()[0];
}

// A Relu before `quantize` changes nothing: its zero point is the lowest
// value of its type (uint8 without one).
bool ReluIsRedundant(const Graph& graph, const Node& quantize) {
  if (!HasZeroPoint(quantize)) return true;
  const Tensor* zero_point = Initializer(graph, quantize.inputs[2]);
  const int64_t lowest = zero_point->dtype() == DType::kInt8 ? -128 : 0;
  return ZeroPointOf(graph, quantize) == lowest;
}

// The bias dequantization's scale is x_scale * w_scale (within float
// rounding: quantizers compute the product in float32 or double) and its
// zero point 0, per output channel.
bool BiasScaleMatches(const Graph& graph, const Node& bias, const Tensor& x_scale,
                      const Tensor& w_scale, int64_t channels) {
  const Tensor* scale = Initializer(graph, bias.inputs[1]);
  if (scale->num_elements() != 1 && scale->num_elements() != channels) return false;
  if (HasZeroPoint(bias)) {
    const Tensor* zero_point = Initializer(graph, bias.inputs[2]);
    for (int64_t c = 0; c < zero_point->num_elements(); ++c) {
      if (zero_point->data<int32_t>()[c] != 0) return false;
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    const float expected =
        x_scale.data<float>()[0] * w_scale.data<float>()[w_scale.num_elements() == 1 ? 0 : c];
    const float given = scale->data<float>()[scale->num_elements() == 1 ? 0 : c];
    if (!(std::fabs(given - expected) <= 1e-5f * std::fabs(expected))) return false;
  }
  return true;
}

// Whether `conv` has no bias, or one dequantized from int32 initializer
// values with scale x_scale * w_scale and zero point 0 (its DequantizeLinear
// then in *bias_dq).
bool QuantizedBias(const Graph& graph, const std::vector<int>& producers, const Node& conv,
                   const Node& x, const Node& w, int64_t channels, int* bias_dq) {
  if (conv.inputs.size() < 3 || conv.inputs[2] == Node::kAbsentInput) return true;
  *bias_dq = ProducerOf(graph, producers, conv.inputs[2], "DequantizeLinear");
  if (*bias_dq < 0) return false;
  const Node& b = graph.nodes[*bias_dq];
  const Tensor* bias = Initializer(graph, b.inputs[0]);
  return bias != nullptr && bias->dtype() == DType::kInt32 && bias->num_elements() == channels &&
         ConstantParameters(graph, b, channels, 0) &&
         BiasScaleMatches(graph, b, *Initializer(graph, x.inputs[1]),
                          *Initializer(graph, w.inputs[1]), channels);
}

// The QuantizeLinear after `conv` (a Relu it makes redundant in between, then
// in *relu), each value read once, with constant per-tensor parameters and a
// zero point; -1 where there is none.
int QuantizeAfter(const Graph& graph, const std::vector<std::vector<int>>& readers,
                  const Node& conv, int* relu) {
  int y = conv.outputs[0];
  *relu = ReaderOf(graph, readers, y, "Relu", 1);
  if (*relu >= 0) y = graph.nodes[*relu].outputs[0];
  const int q = ReaderOf(graph, readers, y, "QuantizeLinear", 1);
  if (q < 0) return -1;
  const Node& quantize = graph.nodes[q];
  if (!ConstantParameters(graph, quantize, 1, 0) || !HasZeroPoint(quantize)) return -1;
  if (*relu >= 0 && !ReluIsRedundant(graph, quantize)) return -1;
  return q;
}

// The QLinearConv replacing `conv` and the nodes around it, or nothing.
std::optional<Node> QuantizedConv(const Graph& graph, const std::vector<int>& producers,
                                  const std::vector<std::vector<int>>& readers, const Node& conv,
                                  std::set<int>* replaced) {
  if (conv.op_type != "Conv" || conv.inputs.size() < 2 || conv.inputs.size() > 3 ||
      conv.outputs.size() != 1 || !conv.guards.empty()) {
    return std::nullopt;
  }
  const int dx = ProducerOf(graph, producers, conv.inputs[0], "DequantizeLinear");
  const int dw = ProducerOf(graph, producers, conv.inputs[1], "DequantizeLinear");
  if (dx < 0 || dw < 0) return std::nullopt;
  const Node& x = graph.nodes[dx];
  const Node& w = graph.nodes[dw];
  const Tensor* weights = Initializer(graph, w.inputs[0]);
  if (weights == nullptr || weights->rank() != 4) return std::nullopt;
  const int64_t channels = weights->shape()[0];
  if (!ConstantParameters(graph, x, 1, 0) || !ConstantParameters(graph, w, channels, 0)) {
    return std::nullopt;
  }
  const DType x_type = graph.values[x.inputs[0]].type.dtype;
  if (x_type != DType::kUint8 && x_type != DType::kInt8) return std::nullopt;
  if (weights->dtype() != DType::kUint8 && weights->dtype() != DType::kInt8) return std::nullopt;

  int bias_dq = -1;
  if (!QuantizedBias(graph, producers, conv, x, w, channels, &bias_dq)) return std::nullopt;
  int relu = -1;
  const int q = QuantizeAfter(graph, readers, conv, &relu);
  if (q < 0) return std::nullopt;
  const Node& quantize = graph.nodes[q];
  Node fused;
  fused.name = conv.name;
  fused.op_type = "QLinearConv";
  fused.attributes = conv.attributes;
  auto zero_point = [](const Node& node) {
    return HasZeroPoint(node) ? node.inputs[2] : Node::kAbsentInput;
  };
  fused.inputs = {x.inputs[0], x.inputs[1],   zero_point(x),      w.inputs[0],
                  w.inputs[1], zero_point(w), quantize.inputs[1], quantize.inputs[2]};
  if (bias_dq >= 0) fused.inputs.push_back(graph.nodes[bias_dq].inputs[0]);
  fused.outputs = quantize.outputs;
  replaced->insert(q);
  if (relu >= 0) replaced->insert(relu);
  return fused;
}

}  // namespace

void FuseQuantizedConvs(Graph* graph) {
  const std::vector<std::vector<int>> readers = Readers(*graph);
  const std::vector<int> producers = Producers(*graph);
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    std::optional<Node> fused = QuantizedConv(*graph, producers, readers, graph->nodes[n], &dead);
    // The QLinearConv takes the Conv's place; the QuantizeLinear it replaces
    // comes later in topological order, and nothing between reads its
    // output.
    if (fused.has_value()) graph->nodes[n] = std::move(*fused);
  }
  RemoveNodes(graph, dead);
  // Dequantizations only the replaced convolutions read.
  const std::vector<std::vector<int>> now_read = Readers(*graph);
  std::set<int> unread;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    const Node& node = graph->nodes[n];
    if (node.op_type == "DequantizeLinear" && node.outputs.size() == 1 &&
        now_read[node.outputs[0]].empty() && !IsGraphOutput(*graph, node.outputs[0])) {
      unread.insert(static_cast<int>(n));
    }
  }
  RemoveNodes(graph, unread);
}

}  // namespace replicad
