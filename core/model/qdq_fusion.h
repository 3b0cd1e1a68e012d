#ifndef REPLICAD_CORE_MODEL_QDQ_FUSION_H_
#define REPLICAD_CORE_MODEL_QDQ_FUSION_H_

#include "core/model/graph.h"

namespace replicad {

// Int8 models in ONNX's QDQ form (what onnxruntime.quantization's
// quantize_static writes by default) compute in float32 between
// DequantizeLinear and QuantizeLinear nodes; this pass gives their
// convolutions integer arithmetic, as ONNX Runtime's QDQ transformer does:
//
//   DequantizeLinear(x_q) --.
//   DequantizeLinear(w_q) --+-- Conv --[Relu]-- QuantizeLinear --> y_q
//   DequantizeLinear(b_q) --'
//
// becomes QLinearConv(x_q, x_scale, x_zero_point, w_q, w_scale,
// w_zero_point, y_scale, y_zero_point, b_q), where every scale and zero
// point is an initializer, x's are per tensor, w_q is an initializer with
// per-tensor or per-output-channel (axis 0) parameters, the bias (if any) is
// int32 quantized with scale x_scale * w_scale and zero point 0, the Conv's
// output feeds the QuantizeLinear alone, and a Relu between them is one the
// quantization makes redundant (y's zero point is the type's lowest value,
// so every negative value saturates to it anyway). The Conv's float result
// rounded once to y's scale, which is what the QDQ form means, becomes an
// exact int32 sum rounded once: the two differ only where the float sum
// sits within rounding error of a tie. Dequantizations nothing reads any
// more are dropped. Everything else (Add, pooling, MatMul, Gemm) keeps the
// form's float32 arithmetic, which ONNX defines exactly.
void FuseQuantizedConvs(Graph* graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_QDQ_FUSION_H_
