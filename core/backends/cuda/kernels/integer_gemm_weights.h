#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_GEMM_WEIGHTS_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_GEMM_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace replicad {

// Internal to the CUDA kernels: the weights of an integer product on int8
// tensor cores (integer_gemm_launch.h), packed on the host when the plan is
// made. Host code only, so that the packing and the corrections are tested
// without a GPU.

// K and the channel count are padded to multiples of this: cuBLAS's int8
// tensor-core products want leading dimensions and m, k in multiples of 4,
// and 16-byte aligned rows.
inline constexpr int64_t kIntegerGemmAlignment = 16;

int64_t PaddedToIntegerGemm(int64_t count);

// What the weights are and what they meet.
struct IntegerGemmWeightsSource {
  // uint8 or int8: MatMul's B [K, N] (the channels are its columns; any
  // batch dims are 1; a 1-D B [K] is one column) or a convolution's W [M,
  // C, kH, kW] (the channels are its rows).
  const Tensor* weights = nullptr;
  bool channels_are_rows = false;
  // The weights' zero point, one or one per channel (nullptr: 0), of their type.
  const Tensor* zero_point = nullptr;
  // QLinearConv's int32 bias [M] (nullptr: none).
  const Tensor* bias = nullptr;
};

struct IntegerGemmWeights {
  int64_t channels = 0;  // MatMul's N, a convolution's M.
  int64_t depth = 0;     // K: MatMul's K, a convolution's C * kH * kW.
  int64_t padded_channels = 0;
  int64_t padded_depth = 0;
  // [padded_channels, padded_depth]: channel j's K shifted weights, then
  // zeros (padded channels all zeros). cuBLAS reads it as the transposed
  // operand, K-contiguous.
  std::vector<int8_t> values;
  // Per channel (integer_gemm_launch.h's IntegerSumTerms): the bias (0
  // without one), sum_k w'_k in int32 bits (wrapping), and zw'.
  std::vector<int32_t> biases;
  std::vector<int32_t> weight_sums;
  std::vector<int32_t> zero_points;
  // Whether some zw' is not 0: then each row's sum of shifted values is
  // needed.
  bool rows_need_sums = false;
};

// Packs `source`, whose shapes and types the op's rule has checked.
IntegerGemmWeights PackIntegerGemmWeights(const IntegerGemmWeightsSource& source);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_GEMM_WEIGHTS_H_
