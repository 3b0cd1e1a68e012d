#include "core/backends/cpu/kernels/cpu_kernel_factory.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/base/status_macros.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using Builder = KernelOrStatus (*)(const KernelSpec&, CpuKernelContext&);

struct BuilderEntry {
  absl::string_view op_type;
  Builder build;
};

constexpr BuilderEntry kBuilders[] = {
    {"Abs", MakeEltwiseKernel},
    {"Add", MakeBinaryKernel},
    {"And", MakeLogicalKernel},
    {"ArgMax", MakeArgReduceKernel},
    {"ArgMin", MakeArgReduceKernel},
    {"AveragePool", MakeAveragePoolKernel},
    {"BatchNormalization", MakeBatchNormalizationKernel},
    {"Cast", MakeCastKernel},
    {"Ceil", MakeEltwiseKernel},
    {"Clip", MakeClipKernel},
    {"Concat", MakeConcatKernel},
    {"Constant", MakeConstantKernel},
    {"ConstantOfShape", MakeConstantOfShapeKernel},
    {"Conv", MakeConvKernel},
    {"ConvInteger", MakeIntegerConvKernel},
    {"ConvTranspose", MakeConvTransposeKernel},
    {"CumSum", MakeCumSumKernel},
    {"DepthToSpace", MakeDepthSpaceKernel},
    {"DequantizeLinear", MakeDequantizeLinearKernel},
    {"Div", MakeBinaryKernel},
    {"Dropout", MakeCopyKernel},
    {"DynamicQuantizeLinear", MakeDynamicQuantizeLinearKernel},
    {"Einsum", MakeEinsumKernel},
    {"Elu", MakeEltwiseKernel},
    {"Equal", MakeComparisonKernel},
    {"Erf", MakeErfKernel},
    {"Exp", MakeEltwiseKernel},
    {"Expand", MakeExpandKernel},
    {"Flatten", MakeCopyKernel},
    {"Floor", MakeEltwiseKernel},
    {"Gather", MakeGatherKernel},
    {"GatherElements", MakeGatherElementsKernel},
    {"GatherND", MakeGatherNdKernel},
    {"Gelu", MakeEltwiseKernel},
    {"Gemm", MakeGemmKernel},
    {"GlobalAveragePool", MakeGlobalAveragePoolKernel},
    {"GlobalMaxPool", MakeGlobalMaxPoolKernel},
    {"Greater", MakeComparisonKernel},
    {"GreaterOrEqual", MakeComparisonKernel},
    {"GroupNormalization", MakeGroupNormalizationKernel},
    {"HardSigmoid", MakeEltwiseKernel},
    {"HardSwish", MakeEltwiseKernel},
    {"Hardmax", MakeHardmaxKernel},
    {"Identity", MakeCopyKernel},
    {"InstanceNormalization", MakeGroupNormalizationKernel},
    {"LayerNormalization", MakeLayerNormalizationKernel},
    {"LeakyRelu", MakeEltwiseKernel},
    {"Less", MakeComparisonKernel},
    {"LessOrEqual", MakeComparisonKernel},
    {"Log", MakeEltwiseKernel},
    {"LogSoftmax", MakeLogSoftmaxKernel},
    {"MatMul", MakeMatMulKernel},
    {"MatMulInteger", MakeIntegerMatMulKernel},
    {"Max", MakeVariadicKernel},
    {"MaxPool", MakeMaxPoolKernel},
    {"Mean", MakeVariadicKernel},
    {"Min", MakeVariadicKernel},
    {"Mish", MakeEltwiseKernel},
    {"Mod", MakeBinaryKernel},
    {"Mul", MakeBinaryKernel},
    {"Neg", MakeEltwiseKernel},
    {"Not", MakeNotKernel},
    {"OneHot", MakeOneHotKernel},
    {"Or", MakeLogicalKernel},
    {"PRelu", MakeBinaryKernel},
    {"Pad", MakePadKernel},
    {"Pow", MakePowKernel},
    {"QLinearConv", MakeIntegerConvKernel},
    {"QLinearMatMul", MakeIntegerMatMulKernel},
    {"QuantizeLinear", MakeQuantizeLinearKernel},
    {"Range", MakeRangeKernel},
    {"Reciprocal", MakeEltwiseKernel},
    {"ReduceL1", MakeReduceKernel},
    {"ReduceL2", MakeReduceKernel},
    {"ReduceLogSum", MakeReduceKernel},
    {"ReduceLogSumExp", MakeReduceKernel},
    {"ReduceMax", MakeReduceKernel},
    {"ReduceMean", MakeReduceKernel},
    {"ReduceMin", MakeReduceKernel},
    {"ReduceProd", MakeReduceKernel},
    {"ReduceSum", MakeReduceKernel},
    {"ReduceSumSquare", MakeReduceKernel},
    {"Relu", MakeReluKernel},
    {"Reshape", MakeCopyKernel},
    {"Resize", MakeResizeKernel},
    {"RoiAlign", MakeRoiAlignKernel},
    {"Round", MakeEltwiseKernel},
    {"ScatterElements", MakeScatterElementsKernel},
    {"ScatterND", MakeScatterNdKernel},
    {"Selu", MakeEltwiseKernel},
    {"Shape", MakeShapeKernel},
    {"Sigmoid", MakeEltwiseKernel},
    {"Slice", MakeSliceKernel},
    {"Softmax", MakeSoftmaxKernel},
    {"Softplus", MakeEltwiseKernel},
    {"SpaceToDepth", MakeDepthSpaceKernel},
    {"Split", MakeSplitKernel},
    {"Sqrt", MakeEltwiseKernel},
    {"Squeeze", MakeCopyKernel},
    {"Sub", MakeBinaryKernel},
    {"Sum", MakeVariadicKernel},
    {"Tanh", MakeEltwiseKernel},
    {"Tile", MakeTileKernel},
    {"TopK", MakeTopKKernel},
    {"Transpose", MakeTransposeKernel},
    {"Trilu", MakeTriluKernel},
    {"Unsqueeze", MakeCopyKernel},
    {"Upsample", MakeResizeKernel},
    {"Where", MakeWhereKernel},
    {"Xor", MakeLogicalKernel},
    // Training-only (core/ops/training_ops.h), before the fused attention in
    // name order.
    {"replicad.AllFinite", MakeAllFiniteKernel},
    // Fused by the load-time optimizer (core/ops/attention_attributes.h).
    {"replicad.Attention", MakeAttentionKernel},
    // Training-only operators (core/ops/training_ops.h).
    {"replicad.AveragePoolGrad", MakeAveragePoolGradKernel},
    {"replicad.BatchNormGrad", MakeBatchNormGradKernel},
    {"replicad.BatchNormTrain", MakeBatchNormTrainKernel},
    {"replicad.ClipGrad", MakeClipGradKernel},
    {"replicad.ConcatGrad", MakeConcatGradKernel},
    {"replicad.ConvGradData", MakeConvGradDataKernel},
    {"replicad.ConvGradFilter", MakeConvGradFilterKernel},
    {"replicad.DropoutTrain", MakeDropoutTrainKernel},
    {"replicad.GlobalAveragePoolGrad", MakeGlobalAveragePoolGradKernel},
    {"replicad.LogSoftmaxGrad", MakeSoftmaxGradKernel},
    {"replicad.MaxPoolGrad", MakeMaxPoolGradKernel},
    {"replicad.MeanSquaredError", MakeMeanSquaredErrorKernel},
    {"replicad.OptimizerDryRun", MakeOptimizerDryRunKernel},
    {"replicad.OptimizerStep", MakeOptimizerStepKernel},
    {"replicad.PadGrad", MakePadGradKernel},
    {"replicad.ReluGrad", MakeReluGradKernel},
    {"replicad.SliceGrad", MakeSliceGradKernel},
    {"replicad.SoftmaxCrossEntropy", MakeSoftmaxCrossEntropyKernel},
    {"replicad.SoftmaxGrad", MakeSoftmaxGradKernel},
    {"replicad.SumToShape", MakeSumToShapeKernel},
};

// The builders that read inputs in the layouts their producers kept (see
// native_layout.h); every other one gets them reordered to row-major.
bool TakesNativeLayouts(absl::string_view op_type) {
  for (absl::string_view op : {"Add", "AveragePool", "Concat", "Conv", "GlobalAveragePool",
                               "MaxPool", "Mul", "QLinearConv", "ReduceMean"}) {
    if (op == op_type) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> MakeCpuKernel(const KernelSpec& spec,
                                                      CpuKernelContext& context) {
  const BuilderEntry* entry = nullptr;
  for (const BuilderEntry& candidate : kBuilders) {
    if (candidate.op_type == spec.op_type) entry = &candidate;
  }
  if (entry == nullptr) {
    return NodeUnimplemented(
        spec, absl::StrCat("the CPU backend has no kernel for op '", spec.op_type, "'"));
  }
  // Builders trust spec; a stale plan then fails here, not inside oneDNN.
  REPLICAD_RETURN_IF_ERROR(CheckKernelSpec(spec, "CPU"));
  bool all_empty = true;
  for (const TensorType& output : spec.outputs) all_empty &= NumElements(output.shape) == 0;
  if (all_empty) return std::make_unique<EmptyKernel>();
  try {
    KernelOrStatus kernel = HasNativeInputs(spec) && !TakesNativeLayouts(spec.op_type)
                                ? WithRowMajorInputs(spec, context, entry->build)
                                : entry->build(spec, context);
    if (!kernel.ok()) return kernel;
    return CountedIn(*std::move(kernel), &context.finite);
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) {
      return NodeUnimplemented(spec, absl::StrCat("oneDNN has no CPU implementation for this "
                                                  "form (",
                                                  e.what(), ")"));
    }
    return absl::InternalError(
        absl::StrCat(NodeLabel(spec), ": oneDNN failed to build the kernel: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(NodeLabel(spec), ": out of host memory while building the kernel"));
  }
}

}  // namespace replicad
