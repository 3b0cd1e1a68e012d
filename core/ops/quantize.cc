#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/quantize_attributes.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

constexpr std::initializer_list<DType> kEightBit = {DType::kUint8, DType::kInt8};

// Checks that input `index` (`name`) is float32 with one element or, where
// `per_channel` > 1, a 1-D tensor of `per_channel` elements; returns its count.
absl::StatusOr<int64_t> CheckScale(const KernelSpec& spec, int index, absl::string_view name,
                                   int64_t per_channel) {
  REPLICAD_ASSIGN_OR_RETURN(TensorType scale, RequiredInput(spec, index, name));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, index, name, scale, {DType::kFloat32},
                                           {DType::kFloat16, DType::kBFloat16}));
  const int64_t count = NumElements(scale.shape);
  if (count == 1 && scale.shape.size() <= 1) return 1;
  if (per_channel > 1 && scale.shape == Shape{per_channel}) return per_channel;
  return NodeError(spec,
                   absl::StrCat("input ", index, " '", name, "' must be a scalar",
                                per_channel > 1 ? absl::StrCat(" or [", per_channel, "]") : "",
                                ", received ", TensorTypeToString(scale)));
}

// Checks an optional zero point (input `index`): absent, or of `dtype` (one
// of `allowed` when dtype is unset) with `count` elements in the scale's
// form. Returns whether it is present.
absl::StatusOr<bool> CheckZeroPoint(const KernelSpec& spec, int index, absl::string_view name,
                                    std::initializer_list<DType> allowed, int64_t count) {
  if (!HasInput(spec, index)) return false;
  const TensorType& zero_point = *spec.inputs[index];
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, index, name, zero_point, allowed));
  const bool scalar =
      count == 1 && NumElements(zero_point.shape) == 1 && zero_point.shape.size() <= 1;
  if (!scalar && zero_point.shape != Shape{count}) {
    return NodeError(spec,
                     absl::StrCat("input ", index, " '", name, "' must have its scale's ", count,
                                  " element(s), received ", TensorTypeToString(zero_point)));
  }
  return true;
}

// An int32 value that must be 0 when the plan knows it (a bias's zero point).
absl::Status CheckZeroIfKnown(const KernelSpec& spec, int index, absl::string_view name) {
  const Tensor* value = ConstantInput(spec, index);
  if (value == nullptr) return absl::OkStatus();
  const int32_t* data = value->data<int32_t>();
  for (int64_t i = 0; i < value->num_elements(); ++i) {
    if (data[i] != 0) {
      return NodeError(
          spec, absl::StrCat("input ", index, " '", name, "' of int32 values must be 0, received ",
                             data[i], " at position ", i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LinearQuantization> ParseLinear(const KernelSpec& spec, bool quantize) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 3));
  REPLICAD_ASSIGN_OR_RETURN(int64_t block_size, IntAttribute(spec, "block_size", 0));
  if (block_size != 0) {
    return NodeUnimplemented(spec, absl::StrCat("blocked quantization (attribute 'block_size' ",
                                                block_size, ") is not implemented"));
  }
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "x"));
  const char* scale_name = quantize ? "y_scale" : "x_scale";
  const char* zero_point_name = quantize ? "y_zero_point" : "x_zero_point";
  if (quantize) {
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "x", x, {DType::kFloat32},
                                             {DType::kFloat16, DType::kBFloat16, DType::kInt32}));
  } else {
    REPLICAD_RETURN_IF_ERROR(
        CheckInputDType(spec, 0, "x", x, {DType::kUint8, DType::kInt8, DType::kInt32}));
  }
  LinearQuantization q;
  REPLICAD_ASSIGN_OR_RETURN(TensorType scale, RequiredInput(spec, 1, scale_name));
  if (NumElements(scale.shape) != 1 || scale.shape.size() > 1) {
    REPLICAD_ASSIGN_OR_RETURN(int64_t axis_attribute, IntAttribute(spec, "axis", 1));
    REPLICAD_ASSIGN_OR_RETURN(int64_t axis,
                              NormalizeAxis(spec, "axis", axis_attribute, x.shape.size()));
    q.layout.channels = x.shape[axis];
    for (int64_t d = 0; d < axis; ++d) q.layout.outer *= x.shape[d];
    for (size_t d = axis + 1; d < x.shape.size(); ++d) q.layout.inner *= x.shape[d];
  } else {
    q.layout.inner = NumElements(x.shape);
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t count, CheckScale(spec, 1, scale_name, q.layout.channels));
  if (count == 1 && q.layout.channels > 1) {  // A 1-D scale of one element.
    q.layout = QuantizationAxis{1, 1, NumElements(x.shape)};
  }
  if (quantize) {
    REPLICAD_ASSIGN_OR_RETURN(q.has_zero_point,
                              CheckZeroPoint(spec, 2, zero_point_name, kEightBit, count));
    q.quantized = q.has_zero_point ? spec.inputs[2]->dtype : DType::kUint8;
  } else {
    REPLICAD_ASSIGN_OR_RETURN(q.has_zero_point,
                              CheckZeroPoint(spec, 2, zero_point_name, {x.dtype}, count));
    q.quantized = x.dtype;
    if (q.has_zero_point && x.dtype == DType::kInt32) {
      REPLICAD_RETURN_IF_ERROR(CheckZeroIfKnown(spec, 2, zero_point_name));
    }
  }
  return q;
}

// Reads the types and parameters every integer product has, B's scale and
// zero point having `b_channels` per-channel elements when not per tensor.
absl::StatusOr<IntegerProduct> ParseProduct(const KernelSpec& spec, IntegerProductInputs inputs,
                                            bool requantized, int64_t b_channels) {
  IntegerProduct p;
  p.inputs = inputs;
  p.requantized = requantized;
  p.a = spec.inputs[inputs.a]->dtype;
  p.b = spec.inputs[inputs.b]->dtype;
  if (requantized) {
    REPLICAD_RETURN_IF_ERROR(CheckScale(spec, inputs.a_scale, "a_scale", 1).status());
    REPLICAD_ASSIGN_OR_RETURN(p.b_parameters,
                              CheckScale(spec, inputs.b_scale, "b_scale", b_channels));
    REPLICAD_RETURN_IF_ERROR(CheckScale(spec, inputs.y_scale, "y_scale", 1).status());
    REPLICAD_RETURN_IF_ERROR(RequiredInput(spec, inputs.y_zero_point, "y_zero_point").status());
    REPLICAD_RETURN_IF_ERROR(
        CheckZeroPoint(spec, inputs.y_zero_point, "y_zero_point", kEightBit, 1).status());
    p.output = spec.inputs[inputs.y_zero_point]->dtype;
  }
  REPLICAD_RETURN_IF_ERROR(
      CheckZeroPoint(spec, inputs.a_zero_point, "a_zero_point", {p.a}, 1).status());
  if (HasInput(spec, inputs.b_zero_point)) {
    const int64_t count = NumElements(spec.inputs[inputs.b_zero_point]->shape);
    if (p.b_parameters == 1 && count == b_channels) p.b_parameters = b_channels;
    REPLICAD_RETURN_IF_ERROR(
        CheckZeroPoint(spec, inputs.b_zero_point, "b_zero_point", {p.b}, p.b_parameters).status());
  }
  return p;
}

// A and B (or x and w) of an integer product, where the node's form puts
// them, its input count checked, both uint8 or int8.
struct Operands {
  IntegerProductInputs inputs;
  TensorType a;
  TensorType b;
};
absl::StatusOr<Operands> ParseOperands(const KernelSpec& spec, bool requantized,
                                       absl::string_view a_name, absl::string_view b_name) {
  Operands operands;
  if (requantized) {  // QLinearMatMul, and QLinearConv with its optional B.
    REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 8, spec.op_type == "QLinearConv" ? 9 : 8));
    operands.inputs = {.a = 0,
                       .a_scale = 1,
                       .a_zero_point = 2,
                       .b = 3,
                       .b_scale = 4,
                       .b_zero_point = 5,
                       .y_scale = 6,
                       .y_zero_point = 7,
                       .bias = spec.op_type == "QLinearConv" ? 8 : -1};
  } else {
    REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 4));
    operands.inputs = {.a = 0, .a_zero_point = 2, .b = 1, .b_zero_point = 3};
  }
  // An optional input the node leaves out (or lists fewer inputs than) is
  // -1, so that kernels never read past the inputs they are given.
  IntegerProductInputs& optional = operands.inputs;
  for (int* index : {&optional.a_zero_point, &optional.b_zero_point, &optional.bias}) {
    if (!HasInput(spec, *index)) *index = -1;
  }
  const IntegerProductInputs& at = operands.inputs;
  REPLICAD_ASSIGN_OR_RETURN(operands.a, RequiredInput(spec, at.a, a_name));
  REPLICAD_ASSIGN_OR_RETURN(operands.b, RequiredInput(spec, at.b, b_name));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, at.a, a_name, operands.a, kEightBit));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, at.b, b_name, operands.b, kEightBit));
  return operands;
}

}  // namespace

absl::StatusOr<LinearQuantization> ParseQuantizeLinear(const KernelSpec& spec) {
  return ParseLinear(spec, /*quantize=*/true);
}

absl::StatusOr<LinearQuantization> ParseDequantizeLinear(const KernelSpec& spec) {
  return ParseLinear(spec, /*quantize=*/false);
}

absl::StatusOr<IntegerMatMul> ParseIntegerMatMul(const KernelSpec& spec) {
  const bool requantized = spec.op_type == "QLinearMatMul";
  REPLICAD_ASSIGN_OR_RETURN(Operands operands, ParseOperands(spec, requantized, "A", "B"));
  IntegerMatMul matmul;
  REPLICAD_ASSIGN_OR_RETURN(matmul.layout,
                            MatMulShapes(spec, operands.a, operands.b, operands.inputs.b));
  REPLICAD_ASSIGN_OR_RETURN(
      matmul.product, ParseProduct(spec, operands.inputs, requantized, matmul.layout.b.back()));
  return matmul;
}

absl::StatusOr<IntegerConv> ParseIntegerConv(const KernelSpec& spec) {
  const bool requantized = spec.op_type == "QLinearConv";
  REPLICAD_ASSIGN_OR_RETURN(Operands operands, ParseOperands(spec, requantized, "x", "w"));
  const IntegerProductInputs& inputs = operands.inputs;
  const TensorType& x = operands.a;
  const TensorType& w = operands.b;
  REPLICAD_RETURN_IF_ERROR(CheckSpatial2d(spec, x, "integer convolution"));
  if (w.shape.size() != 4) {
    return NodeError(spec,
                     absl::StrCat("input ", inputs.b, " 'w' must have rank 4 like x, received ",
                                  TensorTypeToString(w)));
  }
  IntegerConv conv;
  REPLICAD_ASSIGN_OR_RETURN(conv.conv, ResolveConv2d(spec, x, w, inputs.b));
  REPLICAD_ASSIGN_OR_RETURN(conv.product,
                            ParseProduct(spec, inputs, requantized, conv.conv.out_channels));
  if (HasInput(spec, inputs.bias)) {
    const TensorType& bias = *spec.inputs[inputs.bias];
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, inputs.bias, "B", bias, {DType::kInt32}));
    if (bias.shape != Shape{conv.conv.out_channels}) {
      return NodeError(
          spec, absl::StrCat("input ", inputs.bias, " 'B' must be int32[", conv.conv.out_channels,
                             "], received ", TensorTypeToString(bias)));
    }
  }
  return conv;
}

absl::Status InferQuantizeLinear(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(LinearQuantization q, ParseQuantizeLinear(*spec));
  spec->outputs = {TensorType{q.quantized, spec->inputs[0]->shape}};
  return absl::OkStatus();
}

absl::Status InferDequantizeLinear(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(ParseDequantizeLinear(*spec).status());
  spec->outputs = {TensorType{DType::kFloat32, spec->inputs[0]->shape}};
  return absl::OkStatus();
}

absl::Status InferDynamicQuantizeLinear(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "x"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "x", x, {DType::kFloat32}));
  spec->outputs = {TensorType{DType::kUint8, x.shape}, TensorType{DType::kFloat32, {}},
                   TensorType{DType::kUint8, {}}};
  return absl::OkStatus();
}

absl::Status InferIntegerMatMul(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(IntegerMatMul matmul, ParseIntegerMatMul(*spec));
  spec->outputs = {TensorType{matmul.product.output, matmul.layout.output}};
  return absl::OkStatus();
}

absl::Status InferIntegerConv(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(IntegerConv conv, ParseIntegerConv(*spec));
  const Window2d& window = conv.conv.window;
  spec->outputs = {TensorType{
      conv.product.output,
      {spec->inputs[0]->shape[0], conv.conv.out_channels, window.output[0], window.output[1]}}};
  return absl::OkStatus();
}

}  // namespace replicad
