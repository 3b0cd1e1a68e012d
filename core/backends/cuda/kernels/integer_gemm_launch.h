#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_GEMM_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_GEMM_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backends/cuda/kernels/integer_product_launch.h"
#include "core/ops/host_device.h"

namespace replicad {

// Internal to the CUDA kernels: the integer products whose weights are known
// when the plan is made, on int8 tensor cores (integer_gemm.cu,
// cuda_integer_tensor_core_kernel.cc). cuBLAS's int8 product takes int8
// operands and no zero points, so each operand is shifted to int8 (a uint8
// value v as v - 128, its zero point likewise) and packed K-contiguous with
// K padded by zeros, and the zero points enter as corrections of the raw
// sums, the identity
//   sum_k (a_k - za)(w_k - zw) = sum_k a'_k w'_k - zw' sum_k a'_k
//                                - za' sum_k w'_k + K za' zw'
// computed in int32 bits, wrapping: the exact kernel's sums, bit for bit,
// while the raw sums stay inside int32 (|a'w'| <= 2^14, so K below 2^17:
// kMaxIntegerGemmDepth; cuBLAS may saturate past that where the exact
// kernel wraps). The weights' terms
// (sum_k w'_k, zw', the bias) are worked out when the weights are packed
// (integer_gemm_weights.h); A's zero point may be a run's data (ONNX
// Runtime's dynamic quantization computes it per request). Same conventions
// as elementwise_launch.h.

inline constexpr int64_t kMaxIntegerGemmDepth = (int64_t{1} << 17) - 1;

// What corrects one output channel's raw sum.
struct IntegerSumTerms {
  int32_t bias = 0;                   // The channel's bias (QLinearConv's B), or 0.
  int32_t weight_sum = 0;             // sum_k w'_k.
  int32_t weight_zero_point = 0;      // zw'.
  int32_t row_sum = 0;                // sum_k a'_k of the row (needed where zw' != 0).
  int32_t activation_zero_point = 0;  // za'.
  int64_t depth = 0;                  // K, unpadded.
};

// The channel's sum, plus its bias, from its raw product (cuBLAS's int32
// result), in int32 bits, wrapping.
REPLICAD_HOST_DEVICE inline uint32_t CorrectedIntegerSum(int32_t raw, const IntegerSumTerms& t) {
  const uint32_t za = static_cast<uint32_t>(t.activation_zero_point);
  const uint32_t zw = static_cast<uint32_t>(t.weight_zero_point);
  return static_cast<uint32_t>(raw) + static_cast<uint32_t>(t.bias) -
         zw * static_cast<uint32_t>(t.row_sum) - za * static_cast<uint32_t>(t.weight_sum) +
         static_cast<uint32_t>(t.depth) * za * zw;
}

// The packed operand A': `rows` rows of `padded_depth` int8 values (K
// shifted values, then zeros), `padded_rows` of them (rows past `rows` all
// zeros); `row_sums` [rows] (nullptr: not wanted) the rows' sums of shifted
// values.
struct PackedRows {
  int8_t* values = nullptr;
  int32_t* row_sums = nullptr;
  int64_t rows = 0;
  int64_t padded_rows = 0;
  int64_t depth = 0;
  int64_t padded_depth = 0;
};

// A [first_row + rows, depth] (uint8 or int8, row-major) from row
// `first_row` into `packed`: MatMul's left operand.
void LaunchPackIntegerRows(const void* a, bool a_signed, int64_t first_row,
                           const PackedRows& packed, cudaStream_t stream);

// The im2col rows of a 2-D convolution of group 1 (IntegerConvShape), one
// per output position of images [first_image, first_image + rows /
// positions), k running over (channel, kernel row, kernel column): a
// position in the padding reads as x's zero point (`x_zero_point`, one
// value of x's type on the device; nullptr: 0), shifted, so that it adds
// nothing once corrected.
void LaunchPackIntegerPatches(const void* x, bool x_signed, const void* x_zero_point,
                              const IntegerConvShape& shape, int64_t first_image,
                              const PackedRows& packed, cudaStream_t stream);

// cuBLAS's raw sums of a chunk, row r's channel j at raw[r * ldc + j], and
// what corrects them: per channel `biases`, `weight_sums` and
// `weight_zero_points` [channels] (shifted), the rows' `row_sums` (nullptr
// where every weight zero point is 0), A's zero point (one value of A's type
// on the device; nullptr: 0) and K.
struct RawIntegerSums {
  const int32_t* raw = nullptr;
  int64_t ldc = 0;
  const int32_t* biases = nullptr;
  const int32_t* weight_sums = nullptr;
  const int32_t* weight_zero_points = nullptr;
  const int32_t* row_sums = nullptr;
  const void* activation_zero_point = nullptr;
  bool activation_signed = false;
  int64_t depth = 0;
};

// MatMul's y [first_row + rows, channels] rows from a chunk's sums,
// corrected and stored as `product` says (its zero points and bias unused:
// the sums carry them).
void LaunchIntegerRowsOut(const RawIntegerSums& sums, int64_t rows, int64_t channels,
                          int64_t first_row, void* y, const DeviceProduct& product,
                          cudaStream_t stream);

// A convolution's y [images, channels, positions] (NCHW) images
// [first_image, first_image + images) from a chunk's sums, whose rows are
// the images' positions (transposed through shared memory, so that both the
// reads and the writes are coalesced). channels / 32 must fit a grid
// dimension (65535).
void LaunchIntegerImagesOut(const RawIntegerSums& sums, int64_t images, int64_t channels,
                            int64_t positions, int64_t first_image, void* y,
                            const DeviceProduct& product, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_GEMM_LAUNCH_H_
