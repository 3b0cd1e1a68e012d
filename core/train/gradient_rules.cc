#include "core/train/gradient_rules.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "core/ops/training_ops.h"
#include "core/train/transformer_gradients.h"

namespace replicad {
namespace {

absl::Status NodeFailure(const GradientBuilder& b, absl::string_view message) {
  return absl::UnimplementedError(
      absl::StrCat(b.node().op_type, " node '", b.node().name, "': ", message));
}

// Y = X with another shape: dX = dY reshaped back to X's shape (Shape(X)
// folds away when the plan is made, since X's shape is known then).
absl::Status ReshapeGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const int shape = b.Emit1("Shape", {b.input(0)});
  b.AddInputGradient(0, b.Emit1("Reshape", {b.output_gradient(0), shape}));
  return absl::OkStatus();
}

absl::Status IdentityGradient(GradientBuilder& b) {
  if (b.wants_gradient(0)) b.AddInputGradient(0, b.output_gradient(0));
  return absl::OkStatus();
}

absl::Status DropoutGradient(GradientBuilder& b) {
  // Inference-mode Dropout (no ratio input, or training_mode false) is the
  // identity; training mode needs the mask (not implemented yet).
  const Node& node = b.node();
  if (node.inputs.size() > 2 && node.inputs[2] != Node::kAbsentInput) {
    return NodeFailure(b, "training-mode Dropout has no gradient in replicad yet");
  }
  return IdentityGradient(b);
}

absl::Status ReluGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  b.AddInputGradient(0, b.Emit1(kReluGrad, {b.output(0), b.output_gradient(0)}));
  return absl::OkStatus();
}

absl::Status LeakyReluGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  // Masked by X rather than Y: with a negative slope Y > 0 does not mean X > 0.
  Attributes alpha;
  alpha.Set("alpha", b.node().attributes.GetFloat("alpha", 0.01f).value_or(0.01f));
  b.AddInputGradient(0, b.Emit1(kReluGrad, {b.input(0), b.output_gradient(0)}, alpha));
  return absl::OkStatus();
}

absl::Status ClipGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  std::vector<int> inputs = {b.input(0), b.output_gradient(0)};
  for (size_t i = 1; i < b.node().inputs.size(); ++i) inputs.push_back(b.node().inputs[i]);
  if (b.node().attributes.Has("min") || b.node().attributes.Has("max")) {
    return NodeFailure(b, "Clip with min/max attributes (opset < 11) has no gradient yet");
  }
  b.AddInputGradient(0, b.Emit1(kClipGrad, inputs));
  return absl::OkStatus();
}

// dX = dY * Y * (1 - Y).
absl::Status SigmoidGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const int y = b.output(0);
  const int slope = b.Emit1("Mul", {y, b.Emit1("Sub", {b.Scalar(1.0f), y})});
  b.AddInputGradient(0, b.Emit1("Mul", {b.output_gradient(0), slope}));
  return absl::OkStatus();
}

// dX = dY * (1 - Y^2).
absl::Status TanhGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const int y = b.output(0);
  const int slope = b.Emit1("Sub", {b.Scalar(1.0f), b.Emit1("Mul", {y, y})});
  b.AddInputGradient(0, b.Emit1("Mul", {b.output_gradient(0), slope}));
  return absl::OkStatus();
}

// dX = dY / (2 Y).
absl::Status SqrtGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const int twice = b.Emit1("Mul", {b.output(0), b.Scalar(2.0f)});
  b.AddInputGradient(0, b.Emit1("Div", {b.output_gradient(0), twice}));
  return absl::OkStatus();
}

absl::Status SoftmaxGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const std::string_view op = b.node().op_type == "Softmax" ? kSoftmaxGrad : kLogSoftmaxGrad;
  b.AddInputGradient(0, b.Emit1(op, {b.output(0), b.output_gradient(0)}, b.node().attributes));
  return absl::OkStatus();
}

absl::Status GlobalAveragePoolGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  b.AddInputGradient(0, b.Emit1(kGlobalAveragePoolGrad, {b.input(0), b.output_gradient(0)}));
  return absl::OkStatus();
}

// dX = dY transposed back: the inverse permutation (the default, reversing
// the dims, is its own inverse).
absl::Status TransposeGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  Attributes inverse;
  if (b.node().attributes.Has("perm")) {
    absl::StatusOr<std::vector<int64_t>> perm = b.node().attributes.GetInts("perm", {});
    if (!perm.ok()) return perm.status();
    std::vector<int64_t> back(perm->size());
    for (size_t i = 0; i < perm->size(); ++i) back[(*perm)[i]] = static_cast<int64_t>(i);
    inverse.Set("perm", back);
  }
  b.AddInputGradient(0, b.Emit1("Transpose", {b.output_gradient(0)}, inverse));
  return absl::OkStatus();
}

// Y = A / B: dA = dY / B, dB = -dY * Y / B, each summed back to its shape.
absl::Status DivGradient(GradientBuilder& b) {
  const int g = b.output_gradient(0), denominator = b.input(1);
  if (b.wants_gradient(0)) {
    b.AddInputGradient(0, b.Emit1(kSumToShape, {b.Emit1("Div", {g, denominator}), b.input(0)}));
  }
  if (b.wants_gradient(1)) {
    const int ratio = b.Emit1("Div", {b.Emit1("Mul", {g, b.output(0)}), denominator});
    const int negated = b.Emit1("Mul", {ratio, b.Scalar(-1.0f)});
    b.AddInputGradient(1, b.Emit1(kSumToShape, {negated, b.input(1)}));
  }
  return absl::OkStatus();
}

// Y = A B (matrices in the last two dims, leading dims broadcast):
// dA = dY B^T and dB = A^T dY, each summed back over the dims its operand
// was broadcast along. Transposing the last two dims needs the ranks, which
// the model's types give.
absl::Status MatMulGradient(GradientBuilder& b) {
  const int a = b.input(0), bm = b.input(1), g = b.output_gradient(0);
  const size_t rank_a = b.type(a).shape.size(), rank_b = b.type(bm).shape.size();
  if (rank_a < 2 || rank_b < 2) {
    return NodeFailure(b, absl::StrCat("MatMul's gradient needs operands of known rank >= 2, "
                                       "received ranks ",
                                       rank_a, " and ", rank_b));
  }
  auto transposed = [&](int value, size_t rank) {
    std::vector<int64_t> perm(rank);
    for (size_t d = 0; d < rank; ++d) perm[d] = static_cast<int64_t>(d);
    std::swap(perm[rank - 1], perm[rank - 2]);
    Attributes attributes;
    attributes.Set("perm", perm);
    return b.Emit1("Transpose", {value}, attributes);
  };
  if (b.wants_gradient(0)) {
    const int product = b.Emit1("MatMul", {g, transposed(bm, rank_b)});
    b.AddInputGradient(0, b.Emit1(kSumToShape, {product, a}));
  }
  if (b.wants_gradient(1)) {
    const int product = b.Emit1("MatMul", {transposed(a, rank_a), g});
    b.AddInputGradient(1, b.Emit1(kSumToShape, {product, bm}));
  }
  return absl::OkStatus();
}

// replicad.BatchNormTrain's outputs 1 and 2 are the saved statistics.
absl::Status BatchNormTrainGradient(GradientBuilder& b) {
  const std::vector<int> grads = b.Emit(
      kBatchNormGrad, {b.input(0), b.input(1), b.output(1), b.output(2), b.output_gradient(0)}, 3);
  for (int i = 0; i < 3; ++i) {
    if (b.wants_gradient(i)) b.AddInputGradient(i, grads[i]);
  }
  return absl::OkStatus();
}

absl::Status DropoutTrainGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  b.AddInputGradient(0, b.Emit1("Mul", {b.output_gradient(0), b.output(1)}));
  return absl::OkStatus();
}

absl::Status AveragePoolGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  b.AddInputGradient(
      0, b.Emit1(kAveragePoolGrad, {b.input(0), b.output_gradient(0)}, b.node().attributes));
  return absl::OkStatus();
}

absl::Status ConcatGradient(GradientBuilder& b) {
  const Node& node = b.node();
  std::vector<int> inputs = {b.output_gradient(0)};
  inputs.insert(inputs.end(), node.inputs.begin(), node.inputs.end());
  const std::vector<int> grads =
      b.Emit(kConcatGrad, inputs, static_cast<int>(node.inputs.size()), node.attributes);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (b.wants_gradient(static_cast<int>(i))) b.AddInputGradient(static_cast<int>(i), grads[i]);
  }
  return absl::OkStatus();
}

absl::Status PadGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  std::vector<int> inputs = {b.output_gradient(0)};
  inputs.insert(inputs.end(), b.node().inputs.begin(), b.node().inputs.end());
  if (b.node().attributes.Has("pads")) {
    return NodeFailure(b, "Pad with a pads attribute (opset < 11) has no gradient yet");
  }
  b.AddInputGradient(0, b.Emit1(kPadGrad, inputs, b.node().attributes));
  return absl::OkStatus();
}

absl::Status MaxPoolGradient(GradientBuilder& b) {
  if (b.node().outputs.size() > 1)
    return NodeFailure(b, "MaxPool's Indices output has no gradient");
  if (!b.wants_gradient(0)) return absl::OkStatus();
  b.AddInputGradient(
      0, b.Emit1(kMaxPoolGrad, {b.input(0), b.output_gradient(0)}, b.node().attributes));
  return absl::OkStatus();
}

absl::Status ConvGradient(GradientBuilder& b) {
  const Node& node = b.node();
  const int x = b.input(0), w = b.input(1), dy = b.output_gradient(0);
  const bool has_bias = node.inputs.size() > 2 && node.inputs[2] != Node::kAbsentInput;
  if (b.wants_gradient(0)) {
    b.AddInputGradient(0, b.Emit1(kConvGradData, {x, w, dy}, node.attributes));
  }
  if (b.wants_gradient(1) || (has_bias && b.wants_gradient(2))) {
    const std::vector<int> filter = b.Emit(kConvGradFilter, {x, w, dy}, 2, node.attributes);
    if (b.wants_gradient(1)) b.AddInputGradient(1, filter[0]);
    if (has_bias && b.wants_gradient(2)) b.AddInputGradient(2, filter[1]);
  }
  return absl::OkStatus();
}

Attributes GemmAttributes(int64_t trans_a, int64_t trans_b, float alpha) {
  Attributes attributes;
  attributes.Set("transA", trans_a);
  attributes.Set("transB", trans_b);
  attributes.Set("alpha", alpha);
  return attributes;
}

// Y = alpha * op(A) op(B) + beta * C, with op() transposing where transA /
// transB say. With G = dY: d op(A) = alpha G op(B)^T and d op(B) = alpha
// op(A)^T G; transposing back where op() transposed gives the four cases.
absl::Status GemmGradient(GradientBuilder& b) {
  const Attributes& attributes = b.node().attributes;
  absl::StatusOr<int64_t> trans_a = attributes.GetInt("transA", 0);
  absl::StatusOr<int64_t> trans_b = attributes.GetInt("transB", 0);
  absl::StatusOr<float> alpha = attributes.GetFloat("alpha", 1.0f);
  absl::StatusOr<float> beta = attributes.GetFloat("beta", 1.0f);
  if (!trans_a.ok() || !trans_b.ok() || !alpha.ok() || !beta.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm node '", b.node().name, "': malformed transA/transB/alpha/beta"));
  }
  const int a = b.input(0), bm = b.input(1), g = b.output_gradient(0);
  if (b.wants_gradient(0)) {
    // dA = alpha G op(B)^T, or its transpose alpha op(B) G^T when transA.
    const int da = *trans_a == 0
                       ? b.Emit1("Gemm", {g, bm}, GemmAttributes(0, *trans_b ? 0 : 1, *alpha))
                       : b.Emit1("Gemm", {bm, g}, GemmAttributes(*trans_b, 1, *alpha));
    b.AddInputGradient(0, da);
  }
  if (b.wants_gradient(1)) {
    // dB = alpha op(A)^T G, or its transpose alpha G^T op(A) when transB.
    const int db = *trans_b == 0
                       ? b.Emit1("Gemm", {a, g}, GemmAttributes(*trans_a ? 0 : 1, 0, *alpha))
                       : b.Emit1("Gemm", {g, a}, GemmAttributes(1, *trans_a, *alpha));
    b.AddInputGradient(1, db);
  }
  const bool has_c = b.node().inputs.size() > 2 && b.node().inputs[2] != Node::kAbsentInput;
  if (has_c && b.wants_gradient(2)) {
    int dc = b.Emit1(kSumToShape, {g, b.input(2)});
    if (*beta != 1.0f) dc = b.Emit1("Mul", {dc, b.Scalar(*beta)});
    b.AddInputGradient(2, dc);
  }
  return absl::OkStatus();
}

// Broadcasting binary ops: each operand's gradient is summed back to its shape.
absl::Status AddGradient(GradientBuilder& b) {
  for (int i = 0; i < 2; ++i) {
    if (b.wants_gradient(i)) {
      b.AddInputGradient(i, b.Emit1(kSumToShape, {b.output_gradient(0), b.input(i)}));
    }
  }
  return absl::OkStatus();
}

absl::Status SubGradient(GradientBuilder& b) {
  const int g = b.output_gradient(0);
  if (b.wants_gradient(0)) b.AddInputGradient(0, b.Emit1(kSumToShape, {g, b.input(0)}));
  if (b.wants_gradient(1)) {
    const int negated = b.Emit1("Mul", {g, b.Scalar(-1.0f)});
    b.AddInputGradient(1, b.Emit1(kSumToShape, {negated, b.input(1)}));
  }
  return absl::OkStatus();
}

absl::Status MulGradient(GradientBuilder& b) {
  const int g = b.output_gradient(0);
  for (int i = 0; i < 2; ++i) {
    if (!b.wants_gradient(i)) continue;
    const int scaled = b.Emit1("Mul", {g, b.input(1 - i)});
    b.AddInputGradient(i, b.Emit1(kSumToShape, {scaled, b.input(i)}));
  }
  return absl::OkStatus();
}

struct RuleEntry {
  std::string_view op_type;
  GradientRule rule;
};

// Sorted by type.
constexpr RuleEntry kRules[] = {
    {"Add", AddGradient},
    {"AveragePool", AveragePoolGradient},
    {"Cast", CastGradient},
    {"Clip", ClipGradient},
    {"Concat", ConcatGradient},
    {"Conv", ConvGradient},
    {"Div", DivGradient},
    {"Dropout", DropoutGradient},
    {"Erf", ErfGradient},
    {"Expand", ExpandGradient},
    {"Flatten", ReshapeGradient},
    {"Gather", GatherGradient},
    {"Gemm", GemmGradient},
    {"GlobalAveragePool", GlobalAveragePoolGradient},
    {"Identity", IdentityGradient},
    {"LayerNormalization", LayerNormalizationGradient},
    {"LeakyRelu", LeakyReluGradient},
    {"LogSoftmax", SoftmaxGradient},
    {"MatMul", MatMulGradient},
    {"MaxPool", MaxPoolGradient},
    {"Mul", MulGradient},
    {"Pad", PadGradient},
    {"Pow", PowGradient},
    {"ReduceMean", SumOrMeanGradient},
    {"ReduceSum", SumOrMeanGradient},
    {"Relu", ReluGradient},
    {"Reshape", ReshapeGradient},
    {"Sigmoid", SigmoidGradient},
    {"Slice", SliceGradient},
    {"Softmax", SoftmaxGradient},
    {"Split", SplitGradient},
    {"Sqrt", SqrtGradient},
    {"Squeeze", ReshapeGradient},
    {"Sub", SubGradient},
    {"Tanh", TanhGradient},
    {"Transpose", TransposeGradient},
    {"Unsqueeze", ReshapeGradient},
    {"Where", WhereGradient},
    {kBatchNormTrain, BatchNormTrainGradient},
    {kDropoutTrain, DropoutTrainGradient},
};

}  // namespace

GradientRule FindGradientRule(std::string_view op_type) {
  const auto* it = std::lower_bound(
      std::begin(kRules), std::end(kRules), op_type,
      [](const RuleEntry& entry, std::string_view type) { return entry.op_type < type; });
  return it != std::end(kRules) && it->op_type == op_type ? it->rule : nullptr;
}

std::vector<std::string_view> DifferentiableOps() {
  std::vector<std::string_view> types;
  for (const RuleEntry& entry : kRules) types.push_back(entry.op_type);
  return types;
}

}  // namespace replicad
