#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_KERNEL_BUILDERS_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_KERNEL_BUILDERS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// Internal to the CUDA kernels: one builder per operator family, called by
// MakeCudaKernel after it has re-checked spec against the op's shape rule, so
// a builder may assume spec is valid and its outputs are the inferred ones.
using KernelOrStatus = absl::StatusOr<std::unique_ptr<Kernel>>;

// The broadcast of inputs `a` and `b` to `out` as the element-wise launchers
// read it; Unimplemented (naming the node) past kMaxRank dims.
absl::StatusOr<BroadcastIndex> MakeBroadcastIndex(const KernelSpec& spec, const Shape& a,
                                                  const Shape& b, const Shape& out);

// Device memory of the slot holding a copy of `bytes` host bytes, for a
// kernel's constant tables; copied before this returns (build time only).
absl::StatusOr<std::shared_ptr<Buffer>> UploadToDevice(CudaKernelContext& context, const void* host,
                                                       size_t bytes);

// cuDNN: Conv, 2-D and 3-D (bias, groups, dilations, fused activation and
// sum), ConvTranspose, 2-D and 3-D.
KernelOrStatus MakeCudaConvKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaConvTransposeKernel(const KernelSpec& spec, CudaKernelContext& context);
// cuDNN: MaxPool, AveragePool (2-D windows), GlobalAveragePool, GlobalMaxPool.
// 3-D windows go to MakeCudaPool3dKernel and an int8 model's (int8 or uint8)
// 2-D MaxPool to MakeCudaIntegerMaxPoolKernel, our own kernels with the
// CPU's bytes (cuda_pool3d_kernel.cc, pool3d.cu). MakeCudaPoolKernel checks
// its types: float32, int8 and uint8 for MaxPool.
KernelOrStatus MakeCudaPoolKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaPool3dKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaIntegerMaxPoolKernel(const KernelSpec& spec, CudaKernelContext& context);
// cuDNN: Softmax and LogSoftmax.
KernelOrStatus MakeCudaSoftmaxKernel(const KernelSpec& spec, CudaKernelContext& context);
// cuBLAS: Gemm and MatMul (with fused activation).
KernelOrStatus MakeCudaGemmKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaMatMulKernel(const KernelSpec& spec, CudaKernelContext& context);
// Einsum: a batched matrix product through cuBLAS, any other equation as a
// loop (cuda_einsum_kernel.cc, einsum.cu).
KernelOrStatus MakeCudaEinsumKernel(const KernelSpec& spec, CudaKernelContext& context);
// replicad.Attention as the kernels above, one after another
// (cuda_attention_kernel.cc); Unimplemented for a Where mask.
KernelOrStatus MakeCudaAttentionKernel(const KernelSpec& spec, CudaKernelContext& context);

// Our own kernels (*.cu):
// Add, Sub, Mul, Div and Pow with broadcasting, float32 and int64.
KernelOrStatus MakeCudaBinaryKernel(const KernelSpec& spec, CudaKernelContext& context);
// Equal, Less, LessOrEqual, Greater, GreaterOrEqual; And, Or, Xor, Not;
// Where; Cast to or from bool (cuda_logic_kernels.cc). They check their own
// dtypes (bool among them).
KernelOrStatus MakeCudaCompareKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaLogicKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaWhereKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaBoolCastKernel(const KernelSpec& spec, CudaKernelContext& context);
// ArgMax, ArgMin, Hardmax, CumSum, TopK and Trilu (cuda_axis_kernels.cc;
// float32 and int64 data, Hardmax float32). TopK sorts each line with CUB
// (topk.cu) in the plan's workspace.
KernelOrStatus MakeCudaAxisKernel(const KernelSpec& spec, CudaKernelContext& context);
// Sum, Mean, Max, Min of any number of broadcast inputs.
KernelOrStatus MakeCudaVariadicKernel(const KernelSpec& spec, CudaKernelContext& context);
// Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Sqrt, Erf, Clip.
KernelOrStatus MakeCudaActivationKernel(const KernelSpec& spec, CudaKernelContext& context);
// BatchNormalization in inference form (per-channel scale and shift).
KernelOrStatus MakeCudaBatchNormalizationKernel(const KernelSpec& spec, CudaKernelContext& context);
// LayerNormalization, one block per row.
KernelOrStatus MakeCudaLayerNormalizationKernel(const KernelSpec& spec, CudaKernelContext& context);
// InstanceNormalization and GroupNormalization.
KernelOrStatus MakeCudaGroupNormalizationKernel(const KernelSpec& spec, CudaKernelContext& context);
// The Reduce* ops.
KernelOrStatus MakeCudaReduceKernel(const KernelSpec& spec, CudaKernelContext& context);
// Identity, Flatten, Reshape, Squeeze, Unsqueeze and inference Dropout:
// a device copy.
KernelOrStatus MakeCudaCopyKernel(const KernelSpec& spec, CudaKernelContext& context);
// Transpose, Slice, Pad, Expand (index maps), Concat, Gather.
KernelOrStatus MakeCudaIndexMapKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaConcatKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaSplitKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaGatherKernel(const KernelSpec& spec, CudaKernelContext& context);
// Resize and Upsample, nearest (float32, int64) and linear (float32), from
// tables uploaded when built (cuda_resize_kernel.cc, resize.cu).
KernelOrStatus MakeCudaResizeKernel(const KernelSpec& spec, CudaKernelContext& context);
// GatherElements, ScatterElements, GatherND, ScatterND and OneHot
// (cuda_indexing_kernels.cc, indexing.cu); indices that are data are read
// back and checked before the launch, as Gather's.
KernelOrStatus MakeCudaIndexingKernel(const KernelSpec& spec, CudaKernelContext& context);
// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear
// (cuda_quantize_kernels.cc, quantize.cu); MatMulInteger, QLinearMatMul,
// ConvInteger and QLinearConv as an exact integer product of our own
// (cuda_integer_product_kernels.cc, integer_product.cu). The CPU's bytes,
// scales and zero points read on the device; they check their own dtypes
// (uint8, int8, int32) through core/ops/quantize_attributes.h.
KernelOrStatus MakeCudaQuantizeKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaIntegerProductKernel(const KernelSpec& spec, CudaKernelContext& context);
// The integer products whose weights, with their zero points, and bias are
// known when the plan is made (MatMul's B without batch dims, a 2-D convolution of
// group 1) on int8 tensor cores through cuBLAS, with the exact kernel's
// bytes (cuda_integer_tensor_core_kernel.cc, integer_gemm.cu); nullptr for
// any other form (K of 2^17 or more, an image whose im2col rows pass 256
// MiB), or where this slot's cuBLAS has no int8 product.
KernelOrStatus MakeCudaIntegerTensorCoreKernel(const KernelSpec& spec, CudaKernelContext& context);
// RoiAlign, the CPU kernel's bytes (cuda_roi_align_kernel.cc, roi_align.cu);
// batch_indices that are data are read back and checked as the indices above.
KernelOrStatus MakeCudaRoiAlignKernel(const KernelSpec& spec, CudaKernelContext& context);
// Constant, ConstantOfShape, Shape and Range (values known at build time)
// and Cast.
KernelOrStatus MakeCudaConstantKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaCastKernel(const KernelSpec& spec, CudaKernelContext& context);

// Training-only operators (core/ops/training_ops.h), forward and backward:
// cuDNN: ConvGradData and ConvGradFilter (dW and dB).
KernelOrStatus MakeCudaConvGradDataKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaConvGradFilterKernel(const KernelSpec& spec, CudaKernelContext& context);
// cuDNN: SoftmaxGrad and LogSoftmaxGrad.
KernelOrStatus MakeCudaSoftmaxGradKernel(const KernelSpec& spec, CudaKernelContext& context);
// MaxPoolGrad, AveragePoolGrad and GlobalAveragePoolGrad (cuda_pool_grad_kernels.cc,
// pool_grad.cu).
KernelOrStatus MakeCudaPoolGradKernel(const KernelSpec& spec, CudaKernelContext& context);
// ReluGrad, ClipGrad, DropoutTrain, SumToShape, ConcatGrad, PadGrad,
// SoftmaxCrossEntropy and MeanSquaredError (training.cu).
KernelOrStatus MakeCudaActivationGradKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaDropoutTrainKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaSumToShapeKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaConcatGradKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaPadGradKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaLossKernel(const KernelSpec& spec, CudaKernelContext& context);
// replicad.AllFinite (training.cu).
KernelOrStatus MakeCudaAllFiniteKernel(const KernelSpec& spec, CudaKernelContext& context);
// BatchNormTrain (statistics summed across the step's slots through its
// collective) and BatchNormGrad (batch_norm_train.cu).
KernelOrStatus MakeCudaBatchNormTrainKernel(const KernelSpec& spec, CudaKernelContext& context);
KernelOrStatus MakeCudaBatchNormGradKernel(const KernelSpec& spec, CudaKernelContext& context);
// replicad.OptimizerStep: SGD, Adam, RMSprop updates in place (optimizer.cu).
KernelOrStatus MakeCudaOptimizerStepKernel(const KernelSpec& spec, CudaKernelContext& context);
// replicad.OptimizerDryRun: the same rules on register copies (optimizer.cu).
KernelOrStatus MakeCudaOptimizerDryRunKernel(const KernelSpec& spec, CudaKernelContext& context);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_KERNEL_BUILDERS_H_
