#ifndef REPLICAD_CORE_OPS_QUANTIZE_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_QUANTIZE_ATTRIBUTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/matmul_attributes.h"

namespace replicad {

// Linear quantization, as ONNX defines it and onnxruntime.quantization
// writes int8 models with it: real = scale * (quantized - zero_point), with
// float32 scales and uint8 or int8 quantized values (a bias is int32, with
// scale x_scale * w_scale and zero point 0). Quantizing rounds half to even
// and saturates to the type's range; NaN becomes the type's lowest value,
// as ONNX Runtime's kernels give it.

// How a tensor's scales and zero points apply: one pair for the whole
// tensor, or one per index along an axis. Elements are read as [outer,
// channels, inner], pair c applying to [*, c, *]; per tensor, channels is 1.
struct QuantizationAxis {
  int64_t outer = 1;
  int64_t channels = 1;
  int64_t inner = 1;
};

// QuantizeLinear (opsets 10 to 18): x float32, y_scale float32, optional
// y_zero_point uint8 or int8 -> y of the zero point's type (uint8 without
// one). DequantizeLinear (10 to 18): x uint8, int8 or int32, x_scale float32,
// optional x_zero_point of x's type -> y float32. A scale of one element is
// per tensor; a 1-D scale of x's dim `axis` (default 1) is per axis, and the
// zero point has the scale's shape. InvalidArgument naming the node and the
// input otherwise; Unimplemented for opset 21's block_size and other types
// (float8, int4, a float16 scale).
struct LinearQuantization {
  QuantizationAxis layout;
  DType quantized = DType::kUint8;  // Quantize's y, Dequantize's x.
  bool has_zero_point = false;
};
absl::StatusOr<LinearQuantization> ParseQuantizeLinear(const KernelSpec& spec);
absl::StatusOr<LinearQuantization> ParseDequantizeLinear(const KernelSpec& spec);

// Where the operands of an integer product sit among a node's inputs (-1:
// the node has no such input, or leaves that optional one out, so a kernel
// reads only the inputs it is handed): MatMulInteger (A, B, a_zero_point,
// b_zero_point), QLinearMatMul (a, a_scale, a_zero_point, b, b_scale,
// b_zero_point, y_scale, y_zero_point), ConvInteger (x, w, x_zero_point,
// w_zero_point) and QLinearConv (x, x_scale, x_zero_point, w, w_scale,
// w_zero_point, y_scale, y_zero_point, B).
struct IntegerProductInputs {
  int a = 0, a_scale = -1, a_zero_point = -1;
  int b = 1, b_scale = -1, b_zero_point = -1;
  int y_scale = -1, y_zero_point = -1;
  int bias = -1;
};

// The types and the parameter counts of an integer product. A's zero point
// and scale are per tensor; B's are per tensor (1) or one per output column
// (MatMul's N) or output channel (Conv's M). Sums are exact in int32; the
// QLinear forms then requantize: y = saturate(round(sum * a_scale * b_scale /
// y_scale) + y_zero_point), in y_zero_point's type.
struct IntegerProduct {
  IntegerProductInputs inputs;
  DType a = DType::kUint8;
  DType b = DType::kUint8;
  DType output = DType::kInt32;  // The QLinear forms: y_zero_point's type.
  bool requantized = false;      // QLinearMatMul, QLinearConv.
  int64_t b_parameters = 1;      // Scales and zero points of B: 1, N or M.
};

// MatMulInteger (opset 10) and QLinearMatMul (10): MatMul's shapes.
struct IntegerMatMul {
  IntegerProduct product;
  MatMulLayout layout;
};
absl::StatusOr<IntegerMatMul> ParseIntegerMatMul(const KernelSpec& spec);

// ConvInteger (opset 10) and QLinearConv (10): Conv's attributes and
// geometry (2-D only: other ranks Unimplemented); QLinearConv's B is int32 [M].
struct IntegerConv {
  IntegerProduct product;
  ConvAttributes conv;
};
absl::StatusOr<IntegerConv> ParseIntegerConv(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_QUANTIZE_ATTRIBUTES_H_
