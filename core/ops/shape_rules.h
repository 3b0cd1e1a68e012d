#ifndef REPLICAD_CORE_OPS_SHAPE_RULES_H_
#define REPLICAD_CORE_OPS_SHAPE_RULES_H_

#include "absl/status/status.h"
#include "core/device/kernel.h"

namespace replicad {

// The shape rule of each operator, as OpDefinition::infer expects: validates
// spec and sets spec->outputs. Internal to core/ops; everyone else reaches
// them through FindOp.
absl::Status InferAdd(KernelSpec* spec);
absl::Status InferAveragePool(KernelSpec* spec);
absl::Status InferBatchNormalization(KernelSpec* spec);
absl::Status InferCast(KernelSpec* spec);
absl::Status InferClip(KernelSpec* spec);
absl::Status InferConcat(KernelSpec* spec);
absl::Status InferConstant(KernelSpec* spec);
absl::Status InferConv(KernelSpec* spec);
absl::Status InferConvTranspose(KernelSpec* spec);
absl::Status InferDiv(KernelSpec* spec);
absl::Status InferDropout(KernelSpec* spec);
absl::Status InferErf(KernelSpec* spec);
absl::Status InferFlatten(KernelSpec* spec);
absl::Status InferGather(KernelSpec* spec);
absl::Status InferGelu(KernelSpec* spec);
absl::Status InferGemm(KernelSpec* spec);
absl::Status InferGlobalAveragePool(KernelSpec* spec);
absl::Status InferGlobalMaxPool(KernelSpec* spec);
absl::Status InferHardSigmoid(KernelSpec* spec);
absl::Status InferHardSwish(KernelSpec* spec);
absl::Status InferIdentity(KernelSpec* spec);
absl::Status InferLayerNormalization(KernelSpec* spec);
// InstanceNormalization and GroupNormalization (group_norm.cc).
absl::Status InferGroupNormalization(KernelSpec* spec);
absl::Status InferLeakyRelu(KernelSpec* spec);
absl::Status InferLogSoftmax(KernelSpec* spec);
absl::Status InferMatMul(KernelSpec* spec);
absl::Status InferMaxPool(KernelSpec* spec);
absl::Status InferMul(KernelSpec* spec);
absl::Status InferPad(KernelSpec* spec);
absl::Status InferPow(KernelSpec* spec);
absl::Status InferPRelu(KernelSpec* spec);
// Every Reduce* op (reduce_attributes.h); with axes as input 1, needs its
// value, when present, in spec.constant_inputs.
absl::Status InferReduce(KernelSpec* spec);
absl::Status InferRelu(KernelSpec* spec);
// Linear quantization (quantize.cc): QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear; MatMulInteger and QLinearMatMul; ConvInteger and
// QLinearConv.
absl::Status InferQuantizeLinear(KernelSpec* spec);
absl::Status InferDequantizeLinear(KernelSpec* spec);
absl::Status InferDynamicQuantizeLinear(KernelSpec* spec);
absl::Status InferIntegerMatMul(KernelSpec* spec);
absl::Status InferIntegerConv(KernelSpec* spec);
// Needs input 1 ('shape') in spec.constant_inputs; Unimplemented without it.
absl::Status InferReshape(KernelSpec* spec);
absl::Status InferShape(KernelSpec* spec);
absl::Status InferSigmoid(KernelSpec* spec);
absl::Status InferSoftmax(KernelSpec* spec);
absl::Status InferSqrt(KernelSpec* spec);
absl::Status InferSub(KernelSpec* spec);
absl::Status InferTanh(KernelSpec* spec);
absl::Status InferTranspose(KernelSpec* spec);
// These read the inputs their registry entry's value_inputs names from
// spec.constant_inputs; Unimplemented when those are not known.
absl::Status InferConstantOfShape(KernelSpec* spec);
absl::Status InferExpand(KernelSpec* spec);
absl::Status InferSlice(KernelSpec* spec);
absl::Status InferSqueeze(KernelSpec* spec);
absl::Status InferUnsqueeze(KernelSpec* spec);
absl::Status InferUpsample(KernelSpec* spec);

// RoiAlign (roi_align.cc).
absl::Status InferRoiAlign(KernelSpec* spec);

// NonZero, NonMaxSuppression and If (value_shaped.cc): the outputs' types
// of evaluating the node, which needs every input's value.
absl::Status InferByEvaluating(KernelSpec* spec);

// Indexing (indexing_ops.cc): OneHot needs input 1 ('depth') known.
absl::Status InferGatherElements(KernelSpec* spec);
absl::Status InferGatherNd(KernelSpec* spec);
absl::Status InferScatterElements(KernelSpec* spec);
absl::Status InferOneHot(KernelSpec* spec);

// Rearrangements (rearrange.cc): Tile needs input 1 ('repeats') known;
// DepthToSpace and SpaceToDepth share InferDepthSpace.
absl::Status InferTile(KernelSpec* spec);
absl::Status InferDepthSpace(KernelSpec* spec);

// Along one axis (axis_ops.cc): ArgMax and ArgMin share InferArgReduce;
// CumSum needs input 1 ('axis') and TopK (opset 10+) input 1 ('K') known.
absl::Status InferArgReduce(KernelSpec* spec);
absl::Status InferHardmax(KernelSpec* spec);
absl::Status InferCumSum(KernelSpec* spec);
absl::Status InferTopK(KernelSpec* spec);

// Comparisons and logic (logical.cc). Equal takes bool too; Less, Greater,
// LessOrEqual and GreaterOrEqual numbers only; And, Or and Xor bool. Each
// gives bool.
absl::Status InferEqual(KernelSpec* spec);
absl::Status InferOrderComparison(KernelSpec* spec);
absl::Status InferLogicalBinary(KernelSpec* spec);
absl::Status InferNot(KernelSpec* spec);
absl::Status InferWhere(KernelSpec* spec);

// elementwise.cc: integer Mod follows the divisor's sign (Python's %) unless
// fmod = 1 (C's fmod, the only form for float32).
absl::Status InferMod(KernelSpec* spec);
// Sum, Mean, Max and Min: one or more inputs of one dtype, broadcast together.
absl::Status InferVariadic(KernelSpec* spec);
// activation_ops.cc: Exp, Log, Reciprocal, Softplus, Elu, Selu and Mish
// (float32); Abs and Neg (any number type).
absl::Status InferFloatMath(KernelSpec* spec);
absl::Status InferSignedMath(KernelSpec* spec);

// sequence_ops.cc (sequence_attributes.h). Range needs all three inputs,
// Trilu its k and Split its sizes in spec.constant_inputs.
absl::Status InferRange(KernelSpec* spec);
absl::Status InferTrilu(KernelSpec* spec);
absl::Status InferSplit(KernelSpec* spec);
absl::Status InferScatterND(KernelSpec* spec);
// resize.cc (resize_attributes.h): needs roi, scales and sizes, where given,
// in spec.constant_inputs.
absl::Status InferResize(KernelSpec* spec);
// einsum.cc (einsum_attributes.h).
absl::Status InferEinsum(KernelSpec* spec);

// Training-only operators (training_ops.h).
absl::Status InferReluGrad(KernelSpec* spec);
absl::Status InferBatchNormTrain(KernelSpec* spec);
absl::Status InferBatchNormGrad(KernelSpec* spec);
absl::Status InferDropoutTrain(KernelSpec* spec);
absl::Status InferClipGrad(KernelSpec* spec);
absl::Status InferAveragePoolGrad(KernelSpec* spec);
absl::Status InferConcatGrad(KernelSpec* spec);
absl::Status InferPadGrad(KernelSpec* spec);
absl::Status InferSliceGrad(KernelSpec* spec);
absl::Status InferSoftmaxFamilyGrad(KernelSpec* spec);
absl::Status InferGlobalAveragePoolGrad(KernelSpec* spec);
absl::Status InferMaxPoolGrad(KernelSpec* spec);
absl::Status InferConvGradData(KernelSpec* spec);
absl::Status InferConvGradFilter(KernelSpec* spec);
absl::Status InferSumToShape(KernelSpec* spec);
absl::Status InferSoftmaxCrossEntropy(KernelSpec* spec);
absl::Status InferMeanSquaredError(KernelSpec* spec);
absl::Status InferAllFinite(KernelSpec* spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_SHAPE_RULES_H_
