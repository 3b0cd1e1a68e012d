#include "core/ops/op_registry.h"

#include <algorithm>
#include <iterator>

#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// Sorted by type, so that lookups can bisect and SupportedOps is a copy.
constexpr OpDefinition kOps[] = {
    {"Add", InferAdd},           {"Constant", InferConstant},
    {"Conv", InferConv},         {"Flatten", InferFlatten},
    {"Gemm", InferGemm},         {"GlobalAveragePool", InferGlobalAveragePool},
    {"Identity", InferIdentity}, {"MatMul", InferMatMul},
    {"MaxPool", InferMaxPool},   {"Mul", InferMul},
    {"Relu", InferRelu},         {"Reshape", InferReshape, 1u << 1},
    {"Softmax", InferSoftmax},
};

}  // namespace

const OpDefinition* FindOp(std::string_view op_type) {
  const auto* it = std::lower_bound(
      std::begin(kOps), std::end(kOps), op_type,
      [](const OpDefinition& op, std::string_view type) { return op.type < type; });
  return it != std::end(kOps) && it->type == op_type ? it : nullptr;
}

std::vector<std::string_view> SupportedOps() {
  std::vector<std::string_view> types;
  for (const OpDefinition& op : kOps) types.push_back(op.type);
  return types;
}

}  // namespace replicad
