#include "core/model/compute_precision.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/client_text.h"
#include "core/ops/fused_activation.h"
#include "core/ops/training_ops.h"

namespace replicad {

absl::StatusOr<ComputePrecision> ParseComputePrecision(absl::string_view text,
                                                       absl::string_view field) {
  if (text == "fp32" || text == "float32") return ComputePrecision::kFloat32;
  if (text == "bf16" || text == "bfloat16") return ComputePrecision::kBFloat16;
  if (text == "fp16" || text == "float16") return ComputePrecision::kFloat16;
  if (text == "tf32" || text == "tensorfloat32") return ComputePrecision::kTensorFloat32;
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": expected fp32, bf16, fp16 or tf32, received '", ClientText(text), "'"));
}

namespace {

bool IsMarkedConv(const Node& node) {
  return node.op_type == "Conv" && node.attributes.Has(kPrecisionAttribute);
}

// A marked Conv that may write its output in 16 bits: one output, and no
// fused Swish (the CPU kernel applies it in a float32 pass of its own).
bool WritesSixteenBits(const Node& node) {
  if (!IsMarkedConv(node) || node.outputs.size() != 1 || node.outputs[0] < 0) return false;
  absl::StatusOr<std::optional<FusedActivation>> activation = ReadFusedActivation(node.attributes);
  return activation.ok() && !(activation->has_value() && (*activation)->op_type == "Swish");
}

// A 2-D MaxPool that both backends compute in the type its input arrives in
// (cuDNN's and oneDNN's 16-bit pooling): one output (no Indices), a 2-D
// window, no dilation, explicit pads alike on both sides, floor rounding
// (cuDNN's pooling pads both sides alike and floors).
bool PassesSixteenBits(const Node& node) {
  if (node.op_type != "MaxPool" || node.outputs.size() != 1 || node.outputs[0] < 0 ||
      node.inputs.empty() || node.inputs[0] < 0) {
    return false;
  }
  const Attributes& a = node.attributes;
  const std::vector<int64_t> kernel =
      a.GetInts("kernel_shape", {}).value_or(std::vector<int64_t>{});
  const std::vector<int64_t> pads =
      a.GetInts("pads", {0, 0, 0, 0}).value_or(std::vector<int64_t>{-1});
  const std::vector<int64_t> dilations =
      a.GetInts("dilations", {1, 1}).value_or(std::vector<int64_t>{});
  const std::string auto_pad = a.GetString("auto_pad", "NOTSET").value_or("");
  return kernel.size() == 2 && pads.size() == 4 && pads[0] == pads[2] && pads[1] == pads[3] &&
         dilations == std::vector<int64_t>{1, 1} && a.GetInt("ceil_mode", 0).value_or(1) == 0 &&
         (auto_pad == "NOTSET" || auto_pad == "VALID");
}

// Marks the nodes whose outputs may stay 16-bit, once each, with
// `precision`'s name ("bf16" or "fp16"): marked Convs, and the MaxPools
// between them, whose outputs only marked Convs read (as X, input 0, or as a
// fused residual's addend, input 3) or such MaxPools, whose own outputs stay
// 16-bit. The largest such set: start from every candidate and drop a value
// whose reader would need float32 until none is dropped (a MaxPool stays
// only while its input does, and its input only while it stays).
void MarkSixteenBitOutputs(Graph* graph, ComputePrecision precision) {
  const size_t values = graph->values.size();
  std::vector<std::vector<std::pair<const Node*, int>>> readers(values);
  std::vector<Node*> producer(values, nullptr);
  for (Node& node : graph->nodes) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] >= 0) readers[node.inputs[i]].push_back({&node, static_cast<int>(i)});
    }
    for (int v : node.outputs) {
      if (v >= 0) producer[v] = &node;
    }
  }
  std::vector<bool> is_output(values, false);
  for (int v : graph->outputs) is_output[v] = true;
  std::vector<bool> sixteen(values, false);
  for (const Node& node : graph->nodes) {
    if (WritesSixteenBits(node) || PassesSixteenBits(node)) sixteen[node.outputs[0]] = true;
  }
  for (size_t v = 0; v < values; ++v) {
    if (sixteen[v] && (is_output[v] || readers[v].empty())) sixteen[v] = false;
  }
  auto reads_sixteen = [&](const Node& reader, int index, int v) {
    if (std::count(reader.inputs.begin(), reader.inputs.end(), v) != 1) return false;
    if (IsMarkedConv(reader)) {
      return index == 0 || (index == 3 && HasFusedSum(reader.attributes));
    }
    return PassesSixteenBits(reader) && index == 0 && sixteen[reader.outputs[0]];
  };
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (size_t v = 0; v < values; ++v) {
      if (!sixteen[v]) continue;
      const Node& from = *producer[v];
      const bool fed = !PassesSixteenBits(from) || sixteen[from.inputs[0]];
      const bool read = std::all_of(readers[v].begin(), readers[v].end(), [&](const auto& r) {
        return reads_sixteen(*r.first, r.second, static_cast<int>(v));
      });
      if (!fed || !read) {
        sixteen[v] = false;
        dropped = true;
      }
    }
  }
  for (size_t v = 0; v < values; ++v) {
    if (sixteen[v]) {
      producer[v]->attributes.Set(kOutputPrecisionAttribute,
                                  AttributeValue(std::string(ComputePrecisionName(precision))));
    }
  }
}

}  // namespace

std::vector<int> WeightProducts(const Graph& graph, const std::set<int>& weights, size_t end) {
  std::vector<int> products;
  for (size_t n = 0; n < end && n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    const bool product =
        node.op_type == "Conv" || node.op_type == "Gemm" || node.op_type == "MatMul";
    if (product && node.inputs.size() >= 2 && weights.count(node.inputs[1]) > 0) {
      products.push_back(static_cast<int>(n));
    }
  }
  return products;
}

void MarkProducts(Graph* graph, ComputePrecision precision, const std::set<int>& weights,
                  size_t end) {
  if (precision == ComputePrecision::kFloat32) return;
  for (int n : WeightProducts(*graph, weights, end)) {
    graph->nodes[n].attributes.Set(kPrecisionAttribute,
                                   AttributeValue(std::string(ComputePrecisionName(precision))));
  }
}

void MarkTensorFloat32Products(Graph* graph) {
  for (Node& node : graph->nodes) {
    if (node.op_type == "Conv" || node.op_type == kConvGradData ||
        node.op_type == kConvGradFilter || node.op_type == "Gemm" || node.op_type == "MatMul") {
      node.attributes.Set(kPrecisionAttribute, AttributeValue(std::string("tf32")));
    }
  }
}

void MarkComputePrecision(Graph* graph, ComputePrecision precision) {
  if (precision == ComputePrecision::kTensorFloat32) {
    MarkTensorFloat32Products(graph);
    return;
  }
  std::set<int> weights;
  for (const auto& [value, tensor] : graph->initializers) {
    if (tensor.dtype() == DType::kFloat32) weights.insert(value);
  }
  MarkProducts(graph, precision, weights, graph->nodes.size());
  if (precision == ComputePrecision::kBFloat16 || precision == ComputePrecision::kFloat16) {
    MarkSixteenBitOutputs(graph, precision);
  }
}

ComputePrecision MarkedComputePrecision(const Graph& graph) {
  for (const Node& node : graph.nodes) {
    absl::StatusOr<std::string> marked = node.attributes.GetString(kPrecisionAttribute, "");
    if (!marked.ok() || marked->empty()) continue;
    if (*marked == "fp16") return ComputePrecision::kFloat16;
    if (*marked == "tf32") return ComputePrecision::kTensorFloat32;
    return ComputePrecision::kBFloat16;
  }
  return ComputePrecision::kFloat32;
}

}  // namespace replicad
