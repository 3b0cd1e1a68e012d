#include "core/backends/cuda/kernels/cuda_kernel_factory.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/model/compute_precision.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using Builder = KernelOrStatus (*)(const KernelSpec&, CudaKernelContext&);

struct BuilderEntry {
  absl::string_view op_type;
  Builder build;
};

constexpr BuilderEntry kBuilders[] = {
    {"Abs", MakeCudaActivationKernel},
    {"Add", MakeCudaBinaryKernel},
    {"And", MakeCudaLogicKernel},
    {"ArgMax", MakeCudaAxisKernel},
    {"ArgMin", MakeCudaAxisKernel},
    {"AveragePool", MakeCudaPoolKernel},
    {"BatchNormalization", MakeCudaBatchNormalizationKernel},
    {"Cast", MakeCudaCastKernel},
    {"Ceil", MakeCudaActivationKernel},
    {"Clip", MakeCudaActivationKernel},
    {"Concat", MakeCudaConcatKernel},
    {"Constant", MakeCudaConstantKernel},
    {"ConstantOfShape", MakeCudaConstantKernel},
    {"Conv", MakeCudaConvKernel},
    {"ConvInteger", MakeCudaIntegerProductKernel},
    {"ConvTranspose", MakeCudaConvTransposeKernel},
    {"CumSum", MakeCudaAxisKernel},
    {"DepthToSpace", MakeCudaIndexMapKernel},
    {"DequantizeLinear", MakeCudaQuantizeKernel},
    {"Div", MakeCudaBinaryKernel},
    {"Dropout", MakeCudaCopyKernel},
    {"DynamicQuantizeLinear", MakeCudaQuantizeKernel},
    {"Einsum", MakeCudaEinsumKernel},
    {"Elu", MakeCudaActivationKernel},
    {"Equal", MakeCudaCompareKernel},
    {"Erf", MakeCudaActivationKernel},
    {"Exp", MakeCudaActivationKernel},
    {"Expand", MakeCudaIndexMapKernel},
    {"Flatten", MakeCudaCopyKernel},
    {"Floor", MakeCudaActivationKernel},
    {"Gather", MakeCudaGatherKernel},
    {"GatherElements", MakeCudaIndexingKernel},
    {"GatherND", MakeCudaIndexingKernel},
    {"Gelu", MakeCudaActivationKernel},
    {"Gemm", MakeCudaGemmKernel},
    {"GlobalAveragePool", MakeCudaPoolKernel},
    {"GlobalMaxPool", MakeCudaPoolKernel},
    {"Greater", MakeCudaCompareKernel},
    {"GreaterOrEqual", MakeCudaCompareKernel},
    {"GroupNormalization", MakeCudaGroupNormalizationKernel},
    {"HardSigmoid", MakeCudaActivationKernel},
    {"HardSwish", MakeCudaActivationKernel},
    {"Hardmax", MakeCudaAxisKernel},
    {"Identity", MakeCudaCopyKernel},
    {"InstanceNormalization", MakeCudaGroupNormalizationKernel},
    {"LayerNormalization", MakeCudaLayerNormalizationKernel},
    {"LeakyRelu", MakeCudaActivationKernel},
    {"Less", MakeCudaCompareKernel},
    {"LessOrEqual", MakeCudaCompareKernel},
    {"Log", MakeCudaActivationKernel},
    {"LogSoftmax", MakeCudaSoftmaxKernel},
    {"MatMul", MakeCudaMatMulKernel},
    {"MatMulInteger", MakeCudaIntegerProductKernel},
    {"Max", MakeCudaVariadicKernel},
    {"MaxPool", MakeCudaPoolKernel},
    {"Mean", MakeCudaVariadicKernel},
    {"Min", MakeCudaVariadicKernel},
    {"Mish", MakeCudaActivationKernel},
    {"Mod", MakeCudaBinaryKernel},
    {"Mul", MakeCudaBinaryKernel},
    {"Neg", MakeCudaActivationKernel},
    {"Not", MakeCudaLogicKernel},
    {"OneHot", MakeCudaIndexingKernel},
    {"Or", MakeCudaLogicKernel},
    {"PRelu", MakeCudaBinaryKernel},
    {"Pad", MakeCudaIndexMapKernel},
    {"Pow", MakeCudaBinaryKernel},
    {"QLinearConv", MakeCudaIntegerProductKernel},
    {"QLinearMatMul", MakeCudaIntegerProductKernel},
    {"QuantizeLinear", MakeCudaQuantizeKernel},
    {"Range", MakeCudaConstantKernel},
    {"Reciprocal", MakeCudaActivationKernel},
    {"ReduceL1", MakeCudaReduceKernel},
    {"ReduceL2", MakeCudaReduceKernel},
    {"ReduceLogSum", MakeCudaReduceKernel},
    {"ReduceLogSumExp", MakeCudaReduceKernel},
    {"ReduceMax", MakeCudaReduceKernel},
    {"ReduceMean", MakeCudaReduceKernel},
    {"ReduceMin", MakeCudaReduceKernel},
    {"ReduceProd", MakeCudaReduceKernel},
    {"ReduceSum", MakeCudaReduceKernel},
    {"ReduceSumSquare", MakeCudaReduceKernel},
    {"Relu", MakeCudaActivationKernel},
    {"Reshape", MakeCudaCopyKernel},
    {"Resize", MakeCudaResizeKernel},
    {"RoiAlign", MakeCudaRoiAlignKernel},
    {"Round", MakeCudaActivationKernel},
    {"ScatterElements", MakeCudaIndexingKernel},
    {"ScatterND", MakeCudaIndexingKernel},
    {"Selu", MakeCudaActivationKernel},
    {"Shape", MakeCudaConstantKernel},
    {"Sigmoid", MakeCudaActivationKernel},
    {"Slice", MakeCudaIndexMapKernel},
    {"Softmax", MakeCudaSoftmaxKernel},
    {"Softplus", MakeCudaActivationKernel},
    {"SpaceToDepth", MakeCudaIndexMapKernel},
    {"Split", MakeCudaSplitKernel},
    {"Sqrt", MakeCudaActivationKernel},
    {"Squeeze", MakeCudaCopyKernel},
    {"Sub", MakeCudaBinaryKernel},
    {"Sum", MakeCudaVariadicKernel},
    {"Tanh", MakeCudaActivationKernel},
    {"Tile", MakeCudaIndexMapKernel},
    {"TopK", MakeCudaAxisKernel},
    {"Transpose", MakeCudaIndexMapKernel},
    {"Trilu", MakeCudaAxisKernel},
    {"Unsqueeze", MakeCudaCopyKernel},
    {"Upsample", MakeCudaResizeKernel},
    {"Where", MakeCudaWhereKernel},
    {"Xor", MakeCudaLogicKernel},
    // Training-only (core/ops/training_ops.h), before the fused attention in
    // name order.
    {"replicad.AllFinite", MakeCudaAllFiniteKernel},
    // Fused by the load-time optimizer (core/ops/attention_attributes.h).
    {"replicad.Attention", MakeCudaAttentionKernel},
    // Training-only operators (core/ops/training_ops.h).
    {"replicad.AveragePoolGrad", MakeCudaPoolGradKernel},
    {"replicad.BatchNormGrad", MakeCudaBatchNormGradKernel},
    {"replicad.BatchNormTrain", MakeCudaBatchNormTrainKernel},
    {"replicad.ClipGrad", MakeCudaActivationGradKernel},
    {"replicad.ConcatGrad", MakeCudaConcatGradKernel},
    {"replicad.ConvGradData", MakeCudaConvGradDataKernel},
    {"replicad.ConvGradFilter", MakeCudaConvGradFilterKernel},
    {"replicad.DropoutTrain", MakeCudaDropoutTrainKernel},
    {"replicad.GlobalAveragePoolGrad", MakeCudaPoolGradKernel},
    {"replicad.LogSoftmaxGrad", MakeCudaSoftmaxGradKernel},
    {"replicad.MaxPoolGrad", MakeCudaPoolGradKernel},
    {"replicad.MeanSquaredError", MakeCudaLossKernel},
    {"replicad.OptimizerDryRun", MakeCudaOptimizerDryRunKernel},
    {"replicad.OptimizerStep", MakeCudaOptimizerStepKernel},
    {"replicad.PadGrad", MakeCudaPadGradKernel},
    {"replicad.ReluGrad", MakeCudaActivationGradKernel},
    {"replicad.SoftmaxCrossEntropy", MakeCudaLossKernel},
    {"replicad.SoftmaxGrad", MakeCudaSoftmaxGradKernel},
    {"replicad.SumToShape", MakeCudaSumToShapeKernel},
};

}  // namespace

absl::StatusOr<std::shared_ptr<Buffer>> UploadToDevice(CudaKernelContext& context, const void* host,
                                                       size_t bytes) {
  absl::StatusOr<std::shared_ptr<Buffer>> buffer = context.allocate(bytes == 0 ? 1 : bytes);
  if (!buffer.ok()) return buffer.status();
  if (bytes != 0) {
    // On the slot's stream, not the legacy default stream (which does not
    // order with the slot's non-blocking one): the block may have been
    // released by work still queued there, and must not be overwritten by
    // it afterwards. Waited for on purpose: `host` is the builder's temporary.
    REPLICAD_CUDA_RETURN_IF_ERROR(
        context.device,
        cudaMemcpyAsync((*buffer)->data(), host, bytes, cudaMemcpyHostToDevice, context.stream));
    REPLICAD_CUDA_RETURN_IF_ERROR(context.device, cudaStreamSynchronize(context.stream));
  }
  return buffer;
}

ComputePrecision ProductMathOf(const KernelSpec& spec, const CudaKernelContext& context) {
  std::string marked;
  if (spec.attributes != nullptr) {
    absl::StatusOr<std::string> precision = spec.attributes->GetString(kPrecisionAttribute, "");
    if (precision.ok()) marked = *precision;
  }
  if (marked == "fp16") return ComputePrecision::kFloat16;
  if (marked == "bf16") return ComputePrecision::kBFloat16;
  if (marked == "tf32" || context.tf32) return ComputePrecision::kTensorFloat32;
  return ComputePrecision::kFloat32;
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeCudaKernel(const KernelSpec& spec,
                                                       CudaKernelContext& context) {
  const BuilderEntry* entry = nullptr;
  for (const BuilderEntry& candidate : kBuilders) {
    if (candidate.op_type == spec.op_type) entry = &candidate;
  }
  if (entry == nullptr) {
    return NodeUnimplemented(
        spec, absl::StrCat("the CUDA backend has no kernel for op '", spec.op_type, "'"));
  }
  REPLICAD_RETURN_IF_ERROR(CheckKernelSpec(spec, "CUDA"));
  // The CUDA kernels compute float32 and int64; bool and the narrower
  // integers only pass through the copies (Reshape and its kin), which move
  // bytes whatever they hold, and float16 and bfloat16 through the copies and
  // Cast; bool also through the comparisons, the logic, Where and a fused
  // attention's mask; the int8 operators take uint8, int8 and int32, and
  // MaxPool an int8 model's int8 or uint8. Those check their own types (the
  // attention through its parts').
  const bool checks_own_types =
      entry->build == MakeCudaCopyKernel || spec.op_type == "Cast" ||
      entry->build == MakeCudaCompareKernel || entry->build == MakeCudaLogicKernel ||
      entry->build == MakeCudaWhereKernel || entry->build == MakeCudaAttentionKernel ||
      entry->build == MakeCudaQuantizeKernel || entry->build == MakeCudaIntegerProductKernel ||
      entry->build == MakeCudaPoolKernel;
  if (!checks_own_types) {
    std::vector<const TensorType*> types;
    for (const std::optional<TensorType>& input : spec.inputs) {
      if (input.has_value()) types.push_back(&*input);
    }
    for (const TensorType& output : spec.outputs) types.push_back(&output);
    for (const TensorType* type : types) {
      if (type->dtype != DType::kFloat32 && type->dtype != DType::kInt64) {
        return NodeUnimplemented(spec, absl::StrCat("the CUDA backend computes float32 and int64; "
                                                    "received ",
                                                    TensorTypeToString(*type)));
      }
    }
  }
  bool all_empty = true;
  for (const TensorType& output : spec.outputs) all_empty &= NumElements(output.shape) == 0;
  if (all_empty) return std::make_unique<EmptyKernel>();
  return entry->build(spec, context);
}

}  // namespace replicad
