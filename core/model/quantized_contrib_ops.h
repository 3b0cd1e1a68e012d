#ifndef REPLICAD_CORE_MODEL_QUANTIZED_CONTRIB_OPS_H_
#define REPLICAD_CORE_MODEL_QUANTIZED_CONTRIB_OPS_H_

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// The QOperator form of onnxruntime.quantization's quantize_static writes,
// besides ONNX's QLinearConv and QLinearMatMul, operators of ONNX Runtime's
// own domain (com.microsoft). This rewrites those a CNN gets into ONNX's
// QDQ form, which they are defined as (ONNX Runtime's contrib op docs):
//   QLinearAdd(a, as, az, b, bs, bz, cs, cz)    -> Q(DQ(a) + DQ(b), cs, cz)
//   QLinearMul(...)                             -> Q(DQ(a) * DQ(b), cs, cz)
//   QLinearGlobalAveragePool(x, xs, xz, ys, yz) -> Q(GlobalAveragePool(DQ(x)), ys, yz)
//                                                  (channels_last 0 only)
//   QGemm(a, as, az, b, bs, bz, [c], [ys, yz])  -> [Q(] Gemm(DQ(a), DQ(b), DQ(c, as * bs))
//                                                  [, ys, yz)], alpha and transA/B kept
// so that they compute in float32 between exact dequantizations, rounding
// once where ONNX Runtime's integer kernels round once (answers within a
// step of its). A com.microsoft node of another type, or of these with
// attributes or inputs beyond the above, stays as it is and is refused as
// an unsupported operator. InvalidArgument naming the node for one with too
// few inputs.
absl::Status ExpandQuantizedContribOps(onnx::GraphProto* graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_QUANTIZED_CONTRIB_OPS_H_
