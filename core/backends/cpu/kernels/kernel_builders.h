#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_KERNEL_BUILDERS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_KERNEL_BUILDERS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/device/kernel.h"
#include "core/ops/reduce_attributes.h"
#include "core/tensor/shape.h"

namespace replicad {

// Internal to the CPU kernels: one builder per operator family, called by
// MakeCpuKernel after it has re-checked spec against the op's shape rule, so
// a builder may assume spec is valid and its outputs are the inferred ones.
// Builders may throw dnnl::error; MakeCpuKernel turns it into a Status.
using KernelOrStatus = absl::StatusOr<std::unique_ptr<Kernel>>;

// A float32 oneDNN reduction of input 0, read as `input` (row-major, or the
// layout it arrives in), to row-major `reduced` (dims kept as 1). Shared by
// ReduceMean/ReduceSum and GlobalAveragePool; the caller handles what oneDNN
// rejects (a reduction that reduces nothing, empty inputs).
KernelOrStatus MakeDnnlReductionKernel(const KernelSpec& spec, CpuKernelContext& context,
                                       dnnl::algorithm algorithm, const dnnl::memory::desc& input,
                                       const Shape& reduced);

KernelOrStatus MakeConvKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConvTransposeKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGemmKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeMatMulKernel(const KernelSpec& spec, CpuKernelContext& context);
// Add, Sub, Mul, Div, Mod and PRelu, any number type.
KernelOrStatus MakeBinaryKernel(const KernelSpec& spec, CpuKernelContext& context);
// Sum, Mean, Max and Min of one or more broadcast inputs.
KernelOrStatus MakeVariadicKernel(const KernelSpec& spec, CpuKernelContext& context);
// Pow: float32 or int64 base, float32 or int64 exponent.
KernelOrStatus MakePowKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeReluKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeSoftmaxKernel(const KernelSpec& spec, CpuKernelContext& context);
// Sigmoid, Tanh, LeakyRelu, HardSigmoid, HardSwish, Sqrt, Exp, Log,
// Reciprocal, Softplus, Elu, Selu, Mish, Gelu, Floor, Ceil and Round
// (float32); Abs and Neg (any number).
KernelOrStatus MakeEltwiseKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeClipKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeErfKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeLogSoftmaxKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeBatchNormalizationKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeLayerNormalizationKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeAttentionKernel(const KernelSpec& spec, CpuKernelContext& context);
// InstanceNormalization and GroupNormalization.
KernelOrStatus MakeGroupNormalizationKernel(const KernelSpec& spec, CpuKernelContext& context);
// RoiAlign (roi_align_kernel.cc).
KernelOrStatus MakeRoiAlignKernel(const KernelSpec& spec, CpuKernelContext& context);
// Every Reduce* op (reduce_attributes.h).
KernelOrStatus MakeReduceKernel(const KernelSpec& spec, CpuKernelContext& context);
// Output 0 as the `kind` reduction of input 0 (row-major, any number type)
// to `reduced` (input's shape with reduced dims set to 1), by our loop.
KernelOrStatus MakeReduceLoopKernel(const KernelSpec& spec, ReduceKind kind, const Shape& reduced);
KernelOrStatus MakeGlobalMaxPoolKernel(const KernelSpec& spec, CpuKernelContext& context);
// MaxPool and AveragePool of X [N, C, D, H, W] (pool3d_kernel.cc); the 2-D
// builders hand rank 5 to it.
KernelOrStatus MakePool3dKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeMaxPoolKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeAveragePoolKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGlobalAveragePoolKernel(const KernelSpec& spec, CpuKernelContext& context);
// Identity, Flatten, Reshape, Squeeze, Unsqueeze and inference Dropout: the
// bytes are unchanged, only the type is.
KernelOrStatus MakeCopyKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConstantKernel(const KernelSpec& spec, CpuKernelContext& context);
// Data movement, any dtype: Transpose (a oneDNN reorder), Concat, Gather, and
// Slice, Pad and Expand (index-map copies).
KernelOrStatus MakeTransposeKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConcatKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGatherKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeSliceKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakePadKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeExpandKernel(const KernelSpec& spec, CpuKernelContext& context);
// Tile, and DepthToSpace and SpaceToDepth: index maps too.
KernelOrStatus MakeTileKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeDepthSpaceKernel(const KernelSpec& spec, CpuKernelContext& context);
// Shape, ConstantOfShape and Range write values known when the kernel is built.
KernelOrStatus MakeShapeKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConstantOfShapeKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeRangeKernel(const KernelSpec& spec, CpuKernelContext& context);
// Trilu, Split and ScatterND (sequence_kernels.cc).
KernelOrStatus MakeTriluKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeSplitKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeScatterNdKernel(const KernelSpec& spec, CpuKernelContext& context);
// Einsum: oneDNN's matmul for a float32 batched matrix product, else a loop.
KernelOrStatus MakeEinsumKernel(const KernelSpec& spec, CpuKernelContext& context);
// Resize and Upsample, nearest (any dtype) and linear (float32).
KernelOrStatus MakeResizeKernel(const KernelSpec& spec, CpuKernelContext& context);
// GatherElements, ScatterElements, GatherND and OneHot (indexing_kernels.cc).
KernelOrStatus MakeScatterElementsKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGatherElementsKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGatherNdKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeOneHotKernel(const KernelSpec& spec, CpuKernelContext& context);
// ArgMax, ArgMin, Hardmax, CumSum and TopK (axis_kernels.cc).
KernelOrStatus MakeArgReduceKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeHardmaxKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeCumSumKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeTopKKernel(const KernelSpec& spec, CpuKernelContext& context);
// Cast between any two dtypes.
KernelOrStatus MakeCastKernel(const KernelSpec& spec, CpuKernelContext& context);
// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear (quantize_kernels.cc).
KernelOrStatus MakeQuantizeLinearKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeDequantizeLinearKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeDynamicQuantizeLinearKernel(const KernelSpec& spec, CpuKernelContext& context);
// MatMulInteger and QLinearMatMul (int8_matmul_kernel.cc); ConvInteger and
// QLinearConv (int8_conv_kernel.cc).
KernelOrStatus MakeIntegerMatMulKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeIntegerConvKernel(const KernelSpec& spec, CpuKernelContext& context);
// Equal, Less, Greater, LessOrEqual and GreaterOrEqual; And, Or and Xor; Not;
// Where (logical_kernel.cc).
KernelOrStatus MakeComparisonKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeLogicalKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeNotKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeWhereKernel(const KernelSpec& spec, CpuKernelContext& context);

// Training-only operators (core/ops/training_ops.h).
KernelOrStatus MakeBatchNormTrainKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeBatchNormGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeDropoutTrainKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeAveragePoolGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConcatGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakePadGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeSliceGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeClipGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGlobalAveragePoolGradKernel(const KernelSpec& spec, CpuKernelContext& context);
// SoftmaxGrad and LogSoftmaxGrad.
KernelOrStatus MakeSoftmaxGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConvGradDataKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConvGradFilterKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeMaxPoolGradKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeMeanSquaredErrorKernel(const KernelSpec& spec, CpuKernelContext& context);
// replicad.AllFinite (all_finite_kernel.cc).
KernelOrStatus MakeAllFiniteKernel(const KernelSpec& spec, CpuKernelContext& context);
// replicad.OptimizerDryRun (optimizer_step_kernel.cc).
KernelOrStatus MakeOptimizerDryRunKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeReluGradKernel(const KernelSpec& spec, CpuKernelContext& context);
// The in-place optimizer update (optimizer_step_kernel.cc says who runs it).
KernelOrStatus MakeOptimizerStepKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeSoftmaxCrossEntropyKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeSumToShapeKernel(const KernelSpec& spec, CpuKernelContext& context);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_KERNEL_BUILDERS_H_
