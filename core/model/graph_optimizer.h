#ifndef REPLICAD_CORE_MODEL_GRAPH_OPTIMIZER_H_
#define REPLICAD_CORE_MODEL_GRAPH_OPTIMIZER_H_

#include "absl/status/status.h"
#include "core/model/graph.h"

namespace replicad {

// Rewrites an imported graph for inference, leaving every graph input,
// output and its name as they are:
//  - Constant nodes become initializers;
//  - Identity, Dropout (inference) and Pad of all-zero pads are removed,
//    their consumers rewired;
//  - an int8 model's DequantizeLinear -> Conv -> QuantizeLinear becomes one
//    QLinearConv (qdq_fusion.h);
//  - Conv followed by BatchNormalization (inference) becomes one Conv with
//    the normalisation folded into its weights and bias (new initializers);
//  - any other BatchNormalization (inference, constant parameters) of a 4-D
//    input becomes a depthwise 1x1 Conv (new initializers);
//  - layer normalization over the last dim written out as ReduceMean, Sub,
//    Pow (or Mul), ReduceMean, Add, Sqrt, Div and an optional Mul by a
//    constant scale and Add of a constant shift (exporters before opset 17)
//    becomes one LayerNormalization (axis -1);
//  - attention, MatMul(Q, Kt), a scale, masks, Softmax and MatMul(., V),
//    becomes one replicad.Attention (attention_fusion.h);
//  - MatMul with constant weights absorbs an Add of a constant bias of one
//    value per output column (input 2, see kFusedBias);
//  - Conv absorbs an Add of its output and a same-shaped value (a residual
//    connection), which then arrives as the Conv's input 3;
//  - Conv, Gemm and MatMul absorb a following Relu, LeakyRelu, Clip (constant
//    bounds), Sigmoid, HardSigmoid, Tanh or HardSwish, the Sigmoid and Mul
//    of a SiLU (y * Sigmoid(y), as exporters write it) as one Swish and those
//    of a HardSwish before opset 14 (y * HardSigmoid(y) with alpha 1/6 and
//    beta 1/2) as one HardSwish, and the Div, Erf, Add and two Muls of an
//    exact GELU as one Gelu (see core/ops/fused_activation.h);
//  - initializers nothing reads any more are dropped.
// A rewrite applies only where the intermediate value has no other reader
// and is not a graph output. Errors only for malformed BatchNormalization
// parameters (InvalidArgument naming the node).
absl::Status OptimizeForInference(Graph* graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_GRAPH_OPTIMIZER_H_
