#ifndef REPLICAD_CORE_TRAIN_FLOAT16_PRODUCTS_H_
#define REPLICAD_CORE_TRAIN_FLOAT16_PRODUCTS_H_

#include <vector>

#include "core/train/training_graph.h"

namespace replicad {

// fp16 training (TrainingConfig precision "fp16") computes what
// torch.autocast(float16) with torch.cuda.amp.GradScaler computes: the
// convolutions and weight products, forward and backward, read float16
// values and sum in float32, and the forward pass's write float16 values;
// everything else, the parameters (master weights), the optimizer and the
// summed gradients stay float32. Values past float16's range (65504) become
// infinities there, which is what the loss scale (loss_scaler.h) watches
// for. The backward pass's products write float32 (as cuBLAS's float16
// products can): a weight's gradient sums the batch's rows in float32, so
// that N slots compute what one does within float32's rounding, as in bf16
// training, where AMP's float16 weight gradients would round each slot's
// partial sum.

// Makes every node of `nodes` (indices into training->graph.nodes) read
// float16 values: each float32 input goes through a Cast to FLOAT16 and back
// to FLOAT (round to nearest even, infinity past the range) before the node
// reads it; a node of the forward pass (before first_backward_node) writes
// them too, each output rounded likewise. A value several of them read is
// rounded once, one a rounding wrote not again. The Casts join the graph
// just before and after their node (first_backward_node moves with the
// forward pass's); guards are the node's. Each node is marked fp16
// (kPrecisionAttribute): a CUDA slot then computes it on tensor cores from
// those float16 values, summing float32; CPU slots compute float32, as
// without the mark.
void RoundProductsToFloat16(TrainingGraph* training, const std::vector<int>& nodes);

// The nodes RoundProductsToFloat16 rounds for fp16 training: the forward
// pass's Conv, Gemm and MatMul nodes reading a parameter, and the products
// (ConvGradData, ConvGradFilter, MatMul, Gemm) their gradient rules emitted.
// `origins[k]`: the forward node whose rule emitted
// graph.nodes[first_backward_node + k].
std::vector<int> Float16Products(const TrainingGraph& training, const std::vector<int>& origins);

// Multiplies the gradient the loss seeds by a new float32 scalar graph input,
// the loss scale (its value index in training->loss_scale_input), which
// becomes the graph's last input. The loss itself is not scaled.
void ScaleLossGradient(TrainingGraph* training);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_FLOAT16_PRODUCTS_H_
