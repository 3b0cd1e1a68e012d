#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_PRODUCT_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_PRODUCT_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace replicad {

// Internal to the CUDA kernels: MatMulInteger, QLinearMatMul, ConvInteger
// and QLinearConv (integer_product.cu; core/ops/quantize_attributes.h) as
// one tiled integer matrix product of our own. Operands are widened to
// int32 less their zero points and summed exactly in int32 (up to 2^15
// products of 9-bit operands, as on the CPU; past that the sums wrap,
// without undefined behaviour), so the order of the sums cannot change
// them; the requantized forms then round each sum with
// core/ops/quantization_math.h, as the CPU does. Same
// conventions as elementwise_launch.h. Parameters are device pointers read
// when the launch runs (a graph may compute them): nothing waits.

// The element type of the product's output.
enum class ProductOutput { kInt32, kUint8, kInt8 };

// An integer product's operand types and parameters. A's zero point and
// scale are one value; B's are one, or one per channel (MatMul's output
// column, Conv's output channel) where the *_per_channel flag says so.
// Zero points of each operand's type, nullptr for 0.
struct DeviceProduct {
  bool a_signed = false;  // int8 rather than uint8.
  bool b_signed = false;
  ProductOutput output = ProductOutput::kInt32;
  const void* a_zero_point = nullptr;
  const void* b_zero_point = nullptr;
  bool b_zero_point_per_channel = false;
  // The requantized forms (output uint8 or int8): y = RequantizeSum(sum,
  // RequantizeMultiplier(*a_scale, b_scale[channel], *y_scale),
  // *y_zero_point), y_zero_point of the output's type.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool b_scale_per_channel = false;
  const float* y_scale = nullptr;
  const void* y_zero_point = nullptr;
  // QLinearConv's optional int32 bias, one per output channel, added to the
  // sum (wrapping) before it is requantized; nullptr for none.
  const int32_t* bias = nullptr;
};

// y [batches, m, n] = A [.., m, k] * B [.., k, n]: output matrix i multiplies
// A's matrix operands[2 i] by B's matrix operands[2 i + 1] (batch
// broadcasting, MatMulLayout's), `operands` device memory.
struct IntegerMatMulShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t batches = 0;
  const int64_t* operands = nullptr;
};
void LaunchIntegerMatMul(const void* a, const void* b, void* y, const IntegerMatMulShape& shape,
                         const DeviceProduct& product, cudaStream_t stream);

// y [images, out_channels, out_h, out_w] = x [images, channels, height,
// width] convolved with w [out_channels, channels / group, kernel_h,
// kernel_w] (core/ops/conv_attributes.h's Window2d), as an implicit product
// per image and group: w's rows by the im2col columns of x, read in place
// (a padded position reads as x's zero point, adding nothing). No workspace.
struct IntegerConvShape {
  int64_t images = 0, channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, group = 1;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t out_h = 0, out_w = 0;
};
void LaunchIntegerConv(const void* x, const void* w, void* y, const IntegerConvShape& shape,
                       const DeviceProduct& product, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_PRODUCT_LAUNCH_H_
