// The host half of int8 tensor-core products (integer_gemm_weights.h,
// integer_gemm_launch.h's CorrectedIntegerSum), without a GPU: the packed
// weights, multiplied as cuBLAS multiplies them (shifted int8 operands, K
// padded with zeros) and corrected by the channels' terms, the rows' sums
// and A's shifted zero point, give sum_k (a_k - za)(w_k - zw) + bias in
// int32 bits, for every
// type mix, per-tensor and per-channel zero points, both orientations of
// the weights, and sums past int32's range (wrapping as the exact kernel
// does). The packing pads K and the channels to multiples of 16 with zeros;
// a 1-D B is one column.

#include "core/backends/cuda/kernels/integer_gemm_weights.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/backends/cuda/kernels/integer_gemm_launch.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

Tensor EightBit(DType type, Shape shape, int32_t low, int32_t high, uint32_t seed) {
  Tensor t = Tensor::Host(type, std::move(shape));
  std::mt19937 random(seed);
  std::uniform_int_distribution<int32_t> pick(low, high);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int32_t v = pick(random);
    if (type == DType::kInt8) {
      t.data<int8_t>()[i] = static_cast<int8_t>(v);
    } else {
      t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    }
  }
  return t;
}

Tensor AnyEightBit(DType type, Shape shape, uint32_t seed) {
  return type == DType::kInt8 ? EightBit(type, std::move(shape), -128, 127, seed)
                              : EightBit(type, std::move(shape), 0, 255, seed);
}

int32_t At(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
}

struct Case {
  DType a_type, w_type;
  int64_t rows, depth, channels;
  bool channels_are_rows;
  bool per_channel_zero_points;
  bool bias;
};

std::string Describe(const Case& c) {
  return std::string(DTypeName(c.a_type)) + " x " + std::string(DTypeName(c.w_type)) + ", K " +
         std::to_string(c.depth) + ", N " + std::to_string(c.channels) +
         (c.channels_are_rows ? ", channels as rows" : ", channels as columns") +
         (c.per_channel_zero_points ? ", per-channel zero points" : "") + (c.bias ? ", bias" : "");
}

// Packs the case's weights, then checks every (row, channel) sum.
void ExpectCorrectedSums(const Case& c, uint32_t seed) {
  const Tensor a = AnyEightBit(c.a_type, {c.rows, c.depth}, seed);
  const Tensor w = c.channels_are_rows ? AnyEightBit(c.w_type, {c.channels, c.depth}, seed + 1)
                                       : AnyEightBit(c.w_type, {c.depth, c.channels}, seed + 1);
  const Tensor a_zero_point = AnyEightBit(c.a_type, {}, seed + 2);
  const Tensor w_zero_point =
      AnyEightBit(c.w_type, c.per_channel_zero_points ? Shape{c.channels} : Shape{}, seed + 3);
  Tensor bias = Tensor::Host(DType::kInt32, {c.channels});
  std::mt19937 random(seed + 4);
  for (int64_t j = 0; j < c.channels; ++j) bias.data<int32_t>()[j] = static_cast<int32_t>(random());

  IntegerGemmWeightsSource source;
  source.weights = &w;
  source.channels_are_rows = c.channels_are_rows;
  source.zero_point = &w_zero_point;
  source.bias = c.bias ? &bias : nullptr;
  const IntegerGemmWeights packed = PackIntegerGemmWeights(source);
  const std::string what = Describe(c);
  ASSERT_EQ(packed.channels, c.channels) << what;
  ASSERT_EQ(packed.depth, c.depth) << what;
  ASSERT_EQ(packed.padded_depth % 16, 0) << what;
  ASSERT_EQ(packed.padded_channels % 16, 0) << what;
  ASSERT_GE(packed.padded_depth, c.depth) << what;
  ASSERT_LT(packed.padded_depth - c.depth, 16) << what;
  for (int64_t j = 0; j < packed.padded_channels; ++j) {
    for (int64_t k = (j < c.channels ? c.depth : 0); k < packed.padded_depth; ++k) {
      ASSERT_EQ(packed.values[j * packed.padded_depth + k], 0)
          << what << ": padding " << j << ", " << k;
    }
  }

  const int32_t a_shift = c.a_type == DType::kUint8 ? 128 : 0;
  int reported = 0;
  for (int64_t i = 0; i < c.rows; ++i) {
    // A's row as the device packs it: shifted to int8, then zeros.
    std::vector<int32_t> row(packed.padded_depth, 0);
    uint32_t row_sum = 0;
    for (int64_t k = 0; k < c.depth; ++k) {
      row[k] = At(a, i * c.depth + k) - a_shift;
      row_sum += static_cast<uint32_t>(row[k]);
    }
    for (int64_t j = 0; j < c.channels; ++j) {
      uint32_t raw = 0;  // cuBLAS's int32 sum of products (wrapping).
      for (int64_t k = 0; k < packed.padded_depth; ++k) {
        raw += static_cast<uint32_t>(row[k] * packed.values[j * packed.padded_depth + k]);
      }
      IntegerSumTerms terms;
      terms.bias = packed.biases[j];
      terms.weight_sum = packed.weight_sums[j];
      terms.weight_zero_point = packed.zero_points[j];
      terms.row_sum = packed.rows_need_sums ? static_cast<int32_t>(row_sum) : 0;
      terms.activation_zero_point = At(a_zero_point, 0) - a_shift;
      terms.depth = c.depth;
      const uint32_t got = CorrectedIntegerSum(static_cast<int32_t>(raw), terms);
      int64_t want = c.bias ? bias.data<int32_t>()[j] : 0;
      const int32_t zw = At(w_zero_point, c.per_channel_zero_points ? j : 0);
      for (int64_t k = 0; k < c.depth; ++k) {
        const int64_t wk = c.channels_are_rows ? j * c.depth + k : k * c.channels + j;
        want +=
            static_cast<int64_t>(At(a, i * c.depth + k) - At(a_zero_point, 0)) * (At(w, wk) - zw);
      }
      if (got != static_cast<uint32_t>(want) && reported++ < 5) {
        ADD_FAILURE() << what << ": row " << i << ", channel " << j << ": "
                      << static_cast<int32_t>(got) << " vs " << static_cast<int32_t>(want);
      }
    }
  }
}

TEST(IntegerGemmWeightsTest, CorrectedSumsAreTheExactSums) {
  uint32_t seed = 1;
  for (DType a : {DType::kUint8, DType::kInt8}) {
    for (DType w : {DType::kUint8, DType::kInt8}) {
      for (bool rows : {false, true}) {
        ExpectCorrectedSums({a, w, 5, 37, 11, rows, false, false}, seed += 5);
        ExpectCorrectedSums({a, w, 3, 64, 16, rows, true, true}, seed += 5);
      }
    }
  }
}

TEST(IntegerGemmWeightsTest, SumsPastInt32WrapAsTheExactKernels) {
  // 140,000 products of -128 * -128 (2.3e9) pass int32's range.
  const int64_t depth = 140000;
  Tensor a = Tensor::Host(DType::kInt8, {1, depth});
  Tensor w = Tensor::Host(DType::kInt8, {depth, 2});
  for (int64_t k = 0; k < depth; ++k) a.data<int8_t>()[k] = -128;
  for (int64_t i = 0; i < 2 * depth; ++i) w.data<int8_t>()[i] = -128;
  IntegerGemmWeightsSource source;
  source.weights = &w;
  const IntegerGemmWeights packed = PackIntegerGemmWeights(source);
  EXPECT_FALSE(packed.rows_need_sums);  // int8 without zero points.
  uint32_t raw = 0;
  for (int64_t k = 0; k < depth; ++k) raw += static_cast<uint32_t>(-128 * -128);
  const int64_t want = depth * 128 * 128;
  for (int64_t j = 0; j < 2; ++j) {
    IntegerSumTerms terms;
    terms.weight_sum = packed.weight_sums[j];
    terms.depth = depth;
    EXPECT_EQ(CorrectedIntegerSum(static_cast<int32_t>(raw), terms), static_cast<uint32_t>(want));
  }
}

TEST(IntegerGemmWeightsTest, OneDimensionalWeightsAreOneColumn) {
  const Tensor w = AnyEightBit(DType::kUint8, {37}, 9);
  IntegerGemmWeightsSource source;
  source.weights = &w;
  const IntegerGemmWeights packed = PackIntegerGemmWeights(source);
  EXPECT_EQ(packed.channels, 1);
  EXPECT_EQ(packed.depth, 37);
  for (int64_t k = 0; k < 37; ++k) {
    EXPECT_EQ(packed.values[k], static_cast<int8_t>(w.data<uint8_t>()[k] - 128)) << k;
  }
}

TEST(IntegerGemmWeightsTest, SymmetricWeightsNeedNoRowSums) {
  // int8 weights with zero point 0 and uint8 weights with zero point 128
  // are 0 once shifted; uint8 weights without a zero point are not.
  const Tensor int8_weights = AnyEightBit(DType::kInt8, {8, 4}, 7);
  const Tensor uint8_weights = AnyEightBit(DType::kUint8, {8, 4}, 8);
  Tensor midpoint = Tensor::Host(DType::kUint8, {});
  midpoint.data<uint8_t>()[0] = 128;
  IntegerGemmWeightsSource source;
  source.weights = &int8_weights;
  EXPECT_FALSE(PackIntegerGemmWeights(source).rows_need_sums);
  source.weights = &uint8_weights;
  source.zero_point = &midpoint;
  EXPECT_FALSE(PackIntegerGemmWeights(source).rows_need_sums);
  source.zero_point = nullptr;
  const IntegerGemmWeights unshifted = PackIntegerGemmWeights(source);
  EXPECT_TRUE(unshifted.rows_need_sums);
  ASSERT_EQ(unshifted.zero_points.size(), 4u);
  EXPECT_EQ(unshifted.zero_points[0], -128);
}

}  // namespace
}  // namespace replicad
