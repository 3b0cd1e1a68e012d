#include "core/train/transformer_gradients.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

absl::Status Refuse(const GradientBuilder& b, absl::string_view message) {
  return absl::UnimplementedError(
      absl::StrCat(b.node().op_type, " node '", b.node().name, "': ", message));
}

int Int64s(GradientBuilder& b, const std::vector<int64_t>& values) {
  Tensor t = Tensor::Host(DType::kInt64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return b.Constant(std::move(t));
}

// `op` (ReduceMean, Unsqueeze, ...) of `x` over `axes`, with the axes as an
// attribute or, from `input_opset`, as input 1.
int WithAxes(GradientBuilder& b, std::string_view op, int x, const std::vector<int64_t>& axes,
             int input_opset, Attributes attributes = {}) {
  if (b.opset() >= input_opset) return b.Emit1(op, {x, Int64s(b, axes)}, std::move(attributes));
  attributes.Set("axes", axes);
  return b.Emit1(op, {x}, std::move(attributes));
}

}  // namespace

absl::Status GatherGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  if (b.node().attributes.GetInt("axis", 0).value_or(0) != 0) {
    return Refuse(b, "only a Gather along axis 0 (an embedding lookup) has a gradient");
  }
  int indices = b.input(1);
  if (b.type(indices).dtype != DType::kInt64) {
    Attributes to_int64;
    to_int64.Set("to", int64_t{7});  // ONNX's INT64.
    indices = b.Emit1("Cast", {indices}, to_int64);
  }
  // ScatterND reads index tuples of one element: indices [..., 1].
  const int tuples = WithAxes(b, "Unsqueeze", indices, {-1}, 13);
  const int zeros = b.Emit1("ConstantOfShape", {b.Emit1("Shape", {b.input(0)})});
  Attributes add;
  add.Set("reduction", std::string("add"));
  b.AddInputGradient(0, b.Emit1("ScatterND", {zeros, tuples, b.output_gradient(0)}, add));
  return absl::OkStatus();
}

absl::Status LayerNormalizationGradient(GradientBuilder& b) {
  const Node& node = b.node();
  // The normalized dims, counted from the back (ReduceMean takes negative
  // axes), so X's rank need not be known: axis -1 is the usual one.
  const int rank = static_cast<int>(b.type(b.input(0)).shape.size());
  int64_t axis = node.attributes.GetInt("axis", -1).value_or(-1);
  if (axis >= 0) {
    if (rank == 0) return Refuse(b, "a non-negative axis needs the rank of input 0 'X' known");
    axis -= rank;
  }
  const float epsilon = node.attributes.GetFloat("epsilon", 1e-5f).value_or(1e-5f);
  std::vector<int64_t> normalized;
  for (int64_t d = axis; d < 0; ++d) normalized.push_back(d);
  auto mean = [&](int v) { return WithAxes(b, "ReduceMean", v, normalized, 18); };
  const int x = b.input(0), dy = b.output_gradient(0);
  // x^ = (x - mean) / sqrt(var + eps), recomputed from X.
  const int centered = b.Emit1("Sub", {x, mean(x)});
  const int variance = mean(b.Emit1("Mul", {centered, centered}));
  const int inv_std = b.Emit1(
      "Div", {b.Scalar(1.0f), b.Emit1("Sqrt", {b.Emit1("Add", {variance, b.Scalar(epsilon)})})});
  const int normalized_x = b.Emit1("Mul", {centered, inv_std});
  if (b.wants_gradient(0)) {
    const int g = b.Emit1("Mul", {dy, b.input(1)});
    const int mean_g = mean(g);
    const int mean_gx = mean(b.Emit1("Mul", {g, normalized_x}));
    const int inner =
        b.Emit1("Sub", {b.Emit1("Sub", {g, mean_g}), b.Emit1("Mul", {normalized_x, mean_gx})});
    b.AddInputGradient(0, b.Emit1("Mul", {inner, inv_std}));
  }
  if (b.wants_gradient(1)) {
    b.AddInputGradient(1, b.Emit1(kSumToShape, {b.Emit1("Mul", {dy, normalized_x}), b.input(1)}));
  }
  if (node.inputs.size() > 2 && b.wants_gradient(2)) {
    b.AddInputGradient(2, b.Emit1(kSumToShape, {dy, b.input(2)}));
  }
  return absl::OkStatus();
}

absl::Status ErfGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const int x = b.input(0);
  const int gaussian = b.Emit1("Exp", {b.Emit1("Mul", {b.Emit1("Mul", {x, x}), b.Scalar(-1.0f)})});
  const float two_over_sqrt_pi = static_cast<float>(2.0 / std::sqrt(M_PI));
  const int slope = b.Emit1("Mul", {gaussian, b.Scalar(two_over_sqrt_pi)});
  b.AddInputGradient(0, b.Emit1("Mul", {b.output_gradient(0), slope}));
  return absl::OkStatus();
}

absl::Status WhereGradient(GradientBuilder& b) {
  const int condition = b.input(0), dy = b.output_gradient(0);
  const int zero = b.Scalar(0.0f);
  if (b.wants_gradient(1)) {
    const int taken = b.Emit1("Where", {condition, dy, zero});
    b.AddInputGradient(1, b.Emit1(kSumToShape, {taken, b.input(1)}));
  }
  if (b.wants_gradient(2)) {
    const int taken = b.Emit1("Where", {condition, zero, dy});
    b.AddInputGradient(2, b.Emit1(kSumToShape, {taken, b.input(2)}));
  }
  return absl::OkStatus();
}

absl::Status SumOrMeanGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const Node& node = b.node();
  const bool mean = node.op_type == "ReduceMean";
  const bool keepdims = node.attributes.GetInt("keepdims", 1).value_or(1) != 0;
  int dy = b.output_gradient(0);
  // ReduceSum took its axes as input 1 from opset 13, ReduceMean from 18.
  const bool axes_input = b.opset() >= (mean ? 18 : 13);
  const bool has_axes =
      axes_input ? node.inputs.size() > 1 && node.inputs[1] >= 0 : node.attributes.Has("axes");
  if (!has_axes && node.attributes.GetInt("noop_with_empty_axes", 0).value_or(0) != 0) {
    b.AddInputGradient(0, dy);  // The identity.
    return absl::OkStatus();
  }
  if (!keepdims && has_axes) {
    // The reduced dims come back as 1s: Unsqueeze by the same axes.
    // (Unsqueeze took its axes as input 1 from opset 13, ReduceMean from 18.)
    if (axes_input) {
      dy = b.Emit1("Unsqueeze", {dy, node.inputs[1]});
    } else {
      dy = WithAxes(b, "Unsqueeze", dy,
                    node.attributes.GetInts("axes", {}).value_or(std::vector<int64_t>{}), 13);
    }
  }
  // Without axes every dim is reduced: dY is a scalar (or all 1s), which
  // broadcasts as it is.
  int dx = b.Emit1("Expand", {dy, b.Emit1("Shape", {b.input(0)})});
  if (mean) {
    // Each output averaged |X| / |Y| elements.
    auto elements = [&b](int v) {
      Attributes all;
      all.Set("keepdims", int64_t{0});
      Attributes to_float;
      to_float.Set("to", int64_t{1});
      return b.Emit1("Cast", {b.Emit1("ReduceProd", {b.Emit1("Shape", {v})}, all)}, to_float);
    };
    dx = b.Emit1("Div", {dx, b.Emit1("Div", {elements(b.input(0)), elements(b.output(0))})});
  }
  b.AddInputGradient(0, dx);
  return absl::OkStatus();
}

// Y = A^B: dA = dY B A^(B-1), dB = dY Y ln(A), each summed back to its shape
// (B is float32 here: an integer exponent is cast first).
absl::Status PowGradient(GradientBuilder& b) {
  const int g = b.output_gradient(0), base = b.input(0);
  Attributes to_float;
  to_float.Set("to", int64_t{1});
  const int exponent = b.Emit1("Cast", {b.input(1)}, to_float);
  if (b.wants_gradient(0)) {
    const int lowered = b.Emit1("Pow", {base, b.Emit1("Sub", {exponent, b.Scalar(1.0f)})});
    const int slope = b.Emit1("Mul", {exponent, lowered});
    b.AddInputGradient(0, b.Emit1(kSumToShape, {b.Emit1("Mul", {g, slope}), base}));
  }
  if (b.wants_gradient(1)) {
    const int scaled = b.Emit1("Mul", {b.Emit1("Mul", {g, b.output(0)}), b.Emit1("Log", {base})});
    b.AddInputGradient(1, b.Emit1(kSumToShape, {scaled, b.input(1)}));
  }
  return absl::OkStatus();
}

absl::Status SliceGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  std::vector<int> inputs = {b.output_gradient(0)};
  inputs.insert(inputs.end(), b.node().inputs.begin(), b.node().inputs.end());
  if (b.node().attributes.Has("starts")) {
    return Refuse(b, "Slice with starts/ends attributes (opset < 10) has no gradient");
  }
  b.AddInputGradient(0, b.Emit1(kSliceGrad, inputs));
  return absl::OkStatus();
}

absl::Status SplitGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  const Node& node = b.node();
  std::vector<int> parts;
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const int g = b.output_gradient(static_cast<int>(o));
    // An output the loss does not read contributes zeros of its shape.
    parts.push_back(
        g >= 0 ? g
               : b.Emit1("ConstantOfShape", {b.Emit1("Shape", {b.output(static_cast<int>(o))})}));
  }
  Attributes axis;
  axis.Set("axis", node.attributes.GetInt("axis", 0).value_or(0));
  b.AddInputGradient(0, b.Emit1("Concat", parts, axis));
  return absl::OkStatus();
}

absl::Status ExpandGradient(GradientBuilder& b) {
  if (b.wants_gradient(0)) {
    b.AddInputGradient(0, b.Emit1(kSumToShape, {b.output_gradient(0), b.input(0)}));
  }
  return absl::OkStatus();
}

absl::Status CastGradient(GradientBuilder& b) {
  if (!b.wants_gradient(0)) return absl::OkStatus();
  if (b.type(b.input(0)).dtype != DType::kFloat32 || b.type(b.output(0)).dtype != DType::kFloat32) {
    return Refuse(b, "only a Cast from float32 to float32 carries a gradient");
  }
  b.AddInputGradient(0, b.output_gradient(0));
  return absl::OkStatus();
}

}  // namespace replicad
