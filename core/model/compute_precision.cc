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

// Marks the marked Convs whose outputs only marked Convs read, as X (input
// 0) or as a fused residual's addend (input 3), once each, with `precision`'s
// name ("bf16" or "fp16"). A fused Swish is left out: the CPU kernel applies
// it in a float32 pass of its own.
void MarkSixteenBitOutputs(Graph* graph, ComputePrecision precision) {
  std::vector<std::vector<std::pair<const Node*, int>>> readers(graph->values.size());
  for (const Node& node : graph->nodes) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] >= 0) readers[node.inputs[i]].push_back({&node, static_cast<int>(i)});
    }
  }
  std::vector<bool> is_output(graph->values.size(), false);
  for (int v : graph->outputs) is_output[v] = true;
  for (Node& node : graph->nodes) {
    if (!IsMarkedConv(node) || node.outputs.size() != 1 || node.outputs[0] < 0) continue;
    const int v = node.outputs[0];
    absl::StatusOr<std::optional<FusedActivation>> activation =
        ReadFusedActivation(node.attributes);
    if (!activation.ok() || (activation->has_value() && (*activation)->op_type == "Swish")) {
      continue;
    }
    if (is_output[v] || readers[v].empty()) continue;
    const bool conv_readers =
        std::all_of(readers[v].begin(), readers[v].end(), [&](const auto& reader) {
          const Node& r = *reader.first;
          return IsMarkedConv(r) && std::count(r.inputs.begin(), r.inputs.end(), v) == 1 &&
                 (reader.second == 0 || (reader.second == 3 && HasFusedSum(r.attributes)));
        });
    if (conv_readers) {
      node.attributes.Set(kOutputPrecisionAttribute,
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
