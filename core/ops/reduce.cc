#include <utility>
#include <vector>

#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/reduce_attributes.h"
#include "core/ops/shape_rules.h"
#include "core/ops/value_input.h"

namespace replicad {
namespace {

// ReduceSum moved its axes to an input in opset 13, the others in 18.
bool AxesFromInput(const KernelSpec& spec) {
  return spec.opset >= (spec.op_type == "ReduceSum" ? 13 : 18);
}

// What each reduction computes; float32 only where a root or logarithm ends
// it (ONNX allows integers there too, which replicad does not compute).
absl::Status CheckDataDType(const KernelSpec& spec, const TensorType& data, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kL2:
    case ReduceKind::kLogSum:
    case ReduceKind::kLogSumExp:
      return CheckInputDType(spec, 0, "data", data, {DType::kFloat32}, kNumericDTypes);
    case ReduceKind::kSum:
    case ReduceKind::kMean:
      return CheckInputDType(spec, 0, "data", data, {DType::kFloat32, DType::kInt32, DType::kInt64},
                             kNumericDTypes);
    default:
      return CheckInputDType(spec, 0, "data", data, kNumericDTypes);
  }
}

}  // namespace

absl::StatusOr<ReduceLayout> ParseReduce(const KernelSpec& spec) {
  const bool from_input = AxesFromInput(spec);
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, from_input ? 2 : 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType data, RequiredInput(spec, 0, "data"));
  REPLICAD_ASSIGN_OR_RETURN(ReduceKind kind, ReduceKindOf(spec));
  REPLICAD_RETURN_IF_ERROR(CheckDataDType(spec, data, kind));
  const int64_t rank = static_cast<int64_t>(data.shape.size());

  std::vector<int64_t> axes;
  bool noop_with_empty_axes = false;
  if (from_input) {
    REPLICAD_ASSIGN_OR_RETURN(int64_t noop, IntAttribute(spec, "noop_with_empty_axes", 0));
    noop_with_empty_axes = noop != 0;
    if (HasInput(spec, 1)) {
      REPLICAD_ASSIGN_OR_RETURN(axes, Int64ValueInput(spec, 1, "axes"));
    }
  } else {
    REPLICAD_ASSIGN_OR_RETURN(axes, IntsAttribute(spec, "axes", {}));
  }
  REPLICAD_ASSIGN_OR_RETURN(
      axes, NormalizeAxes(spec, axes, rank, from_input ? "input 1 'axes'" : "attribute 'axes'"));
  REPLICAD_ASSIGN_OR_RETURN(int64_t keepdims, IntAttribute(spec, "keepdims", 1));

  std::vector<bool> reduce(rank, axes.empty() && !noop_with_empty_axes);
  for (int64_t axis : axes) reduce[axis] = true;
  ReduceLayout layout;
  layout.kind = kind;
  layout.noop = axes.empty() && noop_with_empty_axes;
  for (int64_t d = 0; d < rank; ++d) {
    layout.reduced.push_back(reduce[d] ? 1 : data.shape[d]);
    if (!reduce[d] || keepdims != 0) layout.output.push_back(layout.reduced.back());
  }
  return layout;
}

absl::StatusOr<ReduceKind> ReduceKindOf(const KernelSpec& spec) {
  static constexpr std::pair<const char*, ReduceKind> kKinds[] = {
      {"ReduceSum", ReduceKind::kSum},       {"ReduceMean", ReduceKind::kMean},
      {"ReduceMax", ReduceKind::kMax},       {"ReduceMin", ReduceKind::kMin},
      {"ReduceProd", ReduceKind::kProd},     {"ReduceL1", ReduceKind::kL1},
      {"ReduceL2", ReduceKind::kL2},         {"ReduceSumSquare", ReduceKind::kSumSquare},
      {"ReduceLogSum", ReduceKind::kLogSum}, {"ReduceLogSumExp", ReduceKind::kLogSumExp}};
  for (const auto& [op, kind] : kKinds) {
    if (spec.op_type == op) return kind;
  }
  return NodeUnimplemented(spec, "not a reduction");
}

absl::Status InferReduce(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(ReduceLayout layout, ParseReduce(*spec));
  spec->outputs = {TensorType{spec->inputs[0]->dtype, layout.output}};
  return absl::OkStatus();
}

}  // namespace replicad
