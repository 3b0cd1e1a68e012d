#include "core/model/compute_precision.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/client_text.h"

namespace replicad {

absl::StatusOr<ComputePrecision> ParseComputePrecision(absl::string_view text,
                                                       absl::string_view field) {
  if (text == "fp32" || text == "float32") return ComputePrecision::kFloat32;
  if (text == "bf16" || text == "bfloat16") return ComputePrecision::kBFloat16;
  if (text == "fp16" || text == "float16" || text == "tf32") {
    return absl::UnimplementedError(
        absl::StrCat(field, ": ", text,
                     " computes on a GPU's tensor cores, which replicad does not use yet; "
                     "expected fp32 or bf16"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected fp32 or bf16, received '", ClientText(text), "'"));
}

absl::string_view ComputePrecisionName(ComputePrecision precision) {
  return precision == ComputePrecision::kBFloat16 ? "bf16" : "fp32";
}

void MarkProducts(Graph* graph, ComputePrecision precision, const std::set<int>& weights,
                  size_t end) {
  if (precision == ComputePrecision::kFloat32) return;
  for (size_t n = 0; n < end && n < graph->nodes.size(); ++n) {
    Node& node = graph->nodes[n];
    const bool product =
        node.op_type == "Conv" || node.op_type == "Gemm" || node.op_type == "MatMul";
    if (!product || node.inputs.size() < 2 || weights.count(node.inputs[1]) == 0) continue;
    node.attributes.Set(kPrecisionAttribute,
                        AttributeValue(std::string(ComputePrecisionName(precision))));
  }
}

void MarkComputePrecision(Graph* graph, ComputePrecision precision) {
  std::set<int> weights;
  for (const auto& [value, tensor] : graph->initializers) {
    if (tensor.dtype() == DType::kFloat32) weights.insert(value);
  }
  MarkProducts(graph, precision, weights, graph->nodes.size());
}

ComputePrecision MarkedComputePrecision(const Graph& graph) {
  for (const Node& node : graph.nodes) {
    if (node.attributes.Has(kPrecisionAttribute)) return ComputePrecision::kBFloat16;
  }
  return ComputePrecision::kFloat32;
}

}  // namespace replicad
