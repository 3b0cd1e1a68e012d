#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_INTEGER_PRODUCT_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_INTEGER_PRODUCT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device/kernel.h"
#include "core/ops/quantize_attributes.h"
#include "core/tensor/dtype.h"

namespace replicad {

// Internal to the CPU kernels: the parts the integer products
// (integer_product_kernels.cc, int8_conv_kernel.cc) share.

// Element `index` of uint8 or int8 `values`, widened; 0 where `values` is
// nullptr (an absent zero point).
int32_t EightBitAt(const void* values, DType dtype, int64_t index);

// widened[i] = values[i] - zero_point for `count` uint8 or int8 values.
void WidenLessZeroPoint(const void* values, DType dtype, int64_t count, int32_t zero_point,
                        int32_t* widened);

// c [m, n] = a [m, k] * b [k, n], exact in int32 (operands of at most 9 bits
// each, so sums of up to 2^15 products cannot overflow), on the slot's team.
void Int32MatrixProduct(int64_t m, int64_t n, int64_t k, const int32_t* a, const int32_t* b,
                        int32_t* c);

// The zero points and requantizing multipliers of one product, read from its
// inputs on each run (a graph may compute them). `channels`: B's output
// columns (MatMul's N) or channels (Conv's M); sized once, so Read never
// allocates.
struct ProductParameters {
  ProductParameters(const KernelSpec& spec, const IntegerProduct& product, int64_t channels);
  void Read(const IntegerProduct& product, const void* const* inputs);

  int64_t channels;
  bool b_zero_point_per_channel = false;
  bool b_scale_per_channel = false;
  int32_t a_zero_point = 0;
  std::vector<int32_t> b_zero_point;  // One per channel (repeated when per tensor).
  std::vector<float> multiplier;      // a_scale * b_scale[c] / y_scale, requantized forms.
  int32_t y_zero_point = 0;
};

// Writes `count` sums as `output`: int32 as they are, uint8 or int8
// requantized with the multiplier of channel `first_channel` (+ i where
// `channel_per_element`: a MatMul row, whose elements are B's columns).
void WriteProductRow(const int32_t* sums, int64_t count, DType output, const ProductParameters& p,
                     int64_t first_channel, bool channel_per_element, void* destination);

// ConvInteger or QLinearConv (`conv`, parsed from `spec`) in exact int32
// arithmetic through im2col: any types and parameters.
std::unique_ptr<Kernel> MakeExactIntegerConvKernel(const KernelSpec& spec, const IntegerConv& conv);

// MatMulInteger or QLinearMatMul (`matmul`, parsed from `spec`) in exact
// int32 arithmetic: any types, parameters and batch broadcasting.
std::unique_ptr<Kernel> MakeExactIntegerMatMulKernel(const KernelSpec& spec,
                                                     const IntegerMatMul& matmul);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_INTEGER_PRODUCT_H_
