#include "core/ops/op_registry.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/attention_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/optimizer_step_attributes.h"
#include "core/ops/shape_rules.h"
#include "core/ops/training_ops.h"
#include "core/ops/value_shaped.h"

namespace replicad {
namespace {

// Sorted by type, so that lookups can bisect and SupportedOps is a copy.
constexpr OpDefinition kOps[] = {
    {"Abs", InferSignedMath},
    {"Add", InferAdd},
    {"And", InferLogicalBinary},
    {"ArgMax", InferArgReduce},
    {"ArgMin", InferArgReduce},
    {"AveragePool", InferAveragePool},
    {"BatchNormalization", InferBatchNormalization},
    {"Cast", InferCast},
    {"Ceil", InferFloatMath},
    {"Clip", InferClip},
    {"Concat", InferConcat},
    {"Constant", InferConstant},
    {"ConstantOfShape", InferConstantOfShape, 1u << 0},
    {"Conv", InferConv},
    {"ConvInteger", InferIntegerConv},
    {"ConvTranspose", InferConvTranspose},
    {"CumSum", InferCumSum, 1u << 1},
    {"DepthToSpace", InferDepthSpace},
    {"DequantizeLinear", InferDequantizeLinear},
    {"Div", InferDiv},
    {"Dropout", InferDropout},
    {"DynamicQuantizeLinear", InferDynamicQuantizeLinear},
    {"Einsum", InferEinsum},
    {"Elu", InferFloatMath},
    {"Equal", InferEqual},
    {"Erf", InferErf},
    {"Exp", InferFloatMath},
    {"Expand", InferExpand, 1u << 1},
    {"Flatten", InferFlatten},
    {"Floor", InferFloatMath},
    {"Gather", InferGather},
    {"GatherElements", InferGatherElements},
    {"GatherND", InferGatherNd},
    {"Gelu", InferGelu},
    {"Gemm", InferGemm},
    {"GlobalAveragePool", InferGlobalAveragePool},
    {"GlobalMaxPool", InferGlobalMaxPool},
    {"Greater", InferOrderComparison},
    {"GreaterOrEqual", InferOrderComparison},
    {"GroupNormalization", InferGroupNormalization},
    {"HardSigmoid", InferHardSigmoid},
    {"HardSwish", InferHardSwish},
    {"Hardmax", InferHardmax},
    {"Identity", InferIdentity},
    {"If", InferByEvaluating, ~0u, EvaluateIf},
    {"InstanceNormalization", InferGroupNormalization},
    {"LayerNormalization", InferLayerNormalization},
    {"LeakyRelu", InferLeakyRelu},
    {"Less", InferOrderComparison},
    {"LessOrEqual", InferOrderComparison},
    {"Log", InferFloatMath},
    {"LogSoftmax", InferLogSoftmax},
    {"MatMul", InferMatMul},
    {"MatMulInteger", InferIntegerMatMul},
    {"Max", InferVariadic},
    {"MaxPool", InferMaxPool},
    {"Mean", InferVariadic},
    {"Min", InferVariadic},
    {"Mish", InferFloatMath},
    {"Mod", InferMod},
    {"Mul", InferMul},
    {"Neg", InferSignedMath},
    {"NonMaxSuppression", InferByEvaluating, ~0u, EvaluateNonMaxSuppression},
    {"NonZero", InferByEvaluating, ~0u, EvaluateNonZero},
    {"Not", InferNot},
    {"OneHot", InferOneHot, 1u << 1},
    {"Or", InferLogicalBinary},
    {"PRelu", InferPRelu},
    {"Pad", InferPad, (1u << 1) | (1u << 2) | (1u << 3)},
    {"Pow", InferPow},
    {"QLinearConv", InferIntegerConv},
    {"QLinearMatMul", InferIntegerMatMul},
    {"QuantizeLinear", InferQuantizeLinear},
    {"Range", InferRange, (1u << 0) | (1u << 1) | (1u << 2)},
    {"Reciprocal", InferFloatMath},
    {"ReduceL1", InferReduce, 1u << 1},
    {"ReduceL2", InferReduce, 1u << 1},
    {"ReduceLogSum", InferReduce, 1u << 1},
    {"ReduceLogSumExp", InferReduce, 1u << 1},
    {"ReduceMax", InferReduce, 1u << 1},
    {"ReduceMean", InferReduce, 1u << 1},
    {"ReduceMin", InferReduce, 1u << 1},
    {"ReduceProd", InferReduce, 1u << 1},
    {"ReduceSum", InferReduce, 1u << 1},
    {"ReduceSumSquare", InferReduce, 1u << 1},
    {"Relu", InferRelu},
    {"Reshape", InferReshape, 1u << 1},
    {"Resize", InferResize, (1u << 1) | (1u << 2) | (1u << 3)},
    {"RoiAlign", InferRoiAlign},
    {"Round", InferFloatMath},
    {"ScatterElements", InferScatterElements},
    {"ScatterND", InferScatterND},
    {"Selu", InferFloatMath},
    {"Shape", InferShape},
    {"Sigmoid", InferSigmoid},
    {"Slice", InferSlice, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4)},
    {"Softmax", InferSoftmax},
    {"Softplus", InferFloatMath},
    {"SpaceToDepth", InferDepthSpace},
    {"Split", InferSplit, 1u << 1},
    {"Sqrt", InferSqrt},
    {"Squeeze", InferSqueeze, 1u << 1},
    {"Sub", InferSub},
    {"Sum", InferVariadic},
    {"Tanh", InferTanh},
    {"Tile", InferTile, 1u << 1},
    {"TopK", InferTopK, 1u << 1},
    {"Transpose", InferTranspose},
    {"Trilu", InferTrilu, 1u << 1},
    {"Unsqueeze", InferUnsqueeze, 1u << 1},
    {"Upsample", InferUpsample, 1u << 1},
    {"Where", InferWhere},
    {"Xor", InferLogicalBinary},
    // The engine's own operators: "replicad." sorts after every ONNX type.
    // Training-only; before replicad.Attention in the order FindOp searches.
    {kAllFinite, InferAllFinite},
    // Fused by the load-time optimizer (attention_attributes.h):
    {kAttention, InferAttention},
    // Training-only operators:
    {kAveragePoolGrad, InferAveragePoolGrad},
    {kBatchNormGrad, InferBatchNormGrad},
    {kBatchNormTrain, InferBatchNormTrain},
    {kClipGrad, InferClipGrad, (1u << 2) | (1u << 3)},
    {kConcatGrad, InferConcatGrad},
    {kConvGradData, InferConvGradData},
    {kConvGradFilter, InferConvGradFilter},
    {kDropoutTrain, InferDropoutTrain, 1u << 1},
    {kGlobalAveragePoolGrad, InferGlobalAveragePoolGrad},
    {kLogSoftmaxGrad, InferSoftmaxFamilyGrad},
    {kMaxPoolGrad, InferMaxPoolGrad},
    {kMeanSquaredError, InferMeanSquaredError},
    {kOptimizerDryRun, InferOptimizerDryRun},
    {kOptimizerStep, InferOptimizerStep},
    {kPadGrad, InferPadGrad, (1u << 2) | (1u << 3) | (1u << 4)},
    {kReluGrad, InferReluGrad},
    {kSliceGrad, InferSliceGrad, (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5)},
    {kSoftmaxCrossEntropy, InferSoftmaxCrossEntropy},
    {kSoftmaxGrad, InferSoftmaxFamilyGrad},
    {kSumToShape, InferSumToShape},
};

}  // namespace

const OpDefinition* FindOp(std::string_view op_type) {
  const auto* it = std::lower_bound(
      std::begin(kOps), std::end(kOps), op_type,
      [](const OpDefinition& op, std::string_view type) { return op.type < type; });
  return it != std::end(kOps) && it->type == op_type ? it : nullptr;
}

std::vector<std::string_view> SupportedOps() {
  std::vector<std::string_view> types;
  for (const OpDefinition& op : kOps) {
    if (op.type.substr(0, kTrainingOpPrefix.size()) != kTrainingOpPrefix) types.push_back(op.type);
  }
  return types;
}

absl::Status CheckKernelSpec(const KernelSpec& spec, std::string_view backend) {
  const OpDefinition* op = FindOp(spec.op_type);
  if (op == nullptr) {
    return NodeUnimplemented(
        spec, absl::StrCat("the ", std::string(backend), " backend has no kernel for op '",
                           spec.op_type, "'"));
  }
  if (spec.attributes == nullptr) return NodeError(spec, "KernelSpec.attributes is null");
  KernelSpec checked = spec;
  checked.outputs.clear();
  REPLICAD_RETURN_IF_ERROR(op->infer(&checked));
  // A node may list fewer outputs than the op has (LayerNormalization's
  // Mean and InvStdDev); plans then ask for those only.
  if (!spec.outputs.empty() && spec.outputs.size() < checked.outputs.size()) {
    checked.outputs.resize(spec.outputs.size());
  }
  if (checked.outputs != spec.outputs) {
    auto list = [](const std::vector<TensorType>& types) {
      return absl::StrCat("[",
                          absl::StrJoin(types, ", ",
                                        [](std::string* out, const TensorType& t) {
                                          absl::StrAppend(out, TensorTypeToString(t));
                                        }),
                          "]");
    };
    return NodeError(spec, absl::StrCat("KernelSpec.outputs must be the inferred ",
                                        list(checked.outputs), ", received ", list(spec.outputs)));
  }
  return absl::OkStatus();
}

}  // namespace replicad
