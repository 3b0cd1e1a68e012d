#ifndef REPLICAD_CORE_MODEL_HALF_FLOAT_WIDENING_H_
#define REPLICAD_CORE_MODEL_HALF_FLOAT_WIDENING_H_

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// A float16 or bfloat16 model (exported after model.half(), or converted from
// float32) computes in float32 inside, as ONNX Runtime's CPU provider computes
// the nodes it has no 16-bit kernel for (its InsertCastTransformer): its
// weights, constants and intermediate values become float32, and its
// interface stays as written.
//  - A float16/bfloat16 graph input is read through a Cast to float32 placed
//    first; a float16/bfloat16 graph output is made by a Cast from float32
//    placed last (an output that is a graph input stays that input).
//  - Initializers and tensor attributes (Constant's value, ConstantOfShape's)
//    of those types become float32 with the same values; their names stay,
//    so a checkpoint holds the model's weights, widened.
//  - Cast's `to` and the `dtype` of the generators (EyeLike, Random*) that
//    name those types name float32; value_info follows.
// The answer is float32 arithmetic rounded once at each output: within
// float16's own rounding of what the model computes in float16, not equal to
// it bit for bit (a Cast to float16 inside the graph no longer rounds).
// A model without 16-bit floats is left as it is. InvalidArgument (naming
// the tensor) when a tensor's int32_data does not hold one 16-bit value per
// element.
absl::Status WidenHalfFloats(onnx::GraphProto* graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_HALF_FLOAT_WIDENING_H_
