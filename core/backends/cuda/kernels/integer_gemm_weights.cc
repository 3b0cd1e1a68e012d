#include "core/backends/cuda/kernels/integer_gemm_weights.h"

namespace replicad {
namespace {

int32_t EightBitAt(const Tensor& values, int64_t index) {
  return values.dtype() == DType::kInt8 ? values.data<int8_t>()[index]
                                        : values.data<uint8_t>()[index];
}

}  // namespace

int64_t PaddedToIntegerGemm(int64_t count) {
  return (count + kIntegerGemmAlignment - 1) / kIntegerGemmAlignment * kIntegerGemmAlignment;
}

IntegerGemmWeights PackIntegerGemmWeights(const IntegerGemmWeightsSource& source) {
  const Tensor& w = *source.weights;
  const Shape& shape = w.shape();
  IntegerGemmWeights packed;
  if (source.channels_are_rows) {
    packed.channels = shape[0];
    packed.depth = packed.channels == 0 ? 0 : w.num_elements() / packed.channels;
  } else {  // B [.., K, N] with batch dims of 1, or B [K] (one channel).
    packed.channels = shape.size() >= 2 ? shape.back() : 1;
    packed.depth = packed.channels == 0 ? 0 : w.num_elements() / packed.channels;
  }
  packed.padded_channels = PaddedToIntegerGemm(packed.channels);
  packed.padded_depth = PaddedToIntegerGemm(packed.depth);
  packed.values.assign(static_cast<size_t>(packed.padded_channels * packed.padded_depth), 0);
  packed.biases.assign(packed.channels, 0);
  packed.weight_sums.resize(packed.channels);
  packed.zero_points.resize(packed.channels);
  const int32_t shift = w.dtype() == DType::kUint8 ? -128 : 0;
  for (int64_t j = 0; j < packed.channels; ++j) {
    const Tensor* zp = source.zero_point;
    const int32_t zw =
        (zp == nullptr ? 0 : EightBitAt(*zp, zp->num_elements() == 1 ? 0 : j)) + shift;
    // Unsigned: int32 bits that wrap, as the exact kernel's sums.
    uint32_t weight_sum = 0;
    int8_t* row = packed.values.data() + j * packed.padded_depth;
    for (int64_t k = 0; k < packed.depth; ++k) {
      const int64_t at = source.channels_are_rows ? j * packed.depth + k : k * packed.channels + j;
      const int32_t v = EightBitAt(w, at) + shift;
      row[k] = static_cast<int8_t>(v);
      weight_sum += static_cast<uint32_t>(v);
    }
    if (source.bias != nullptr) packed.biases[j] = source.bias->data<int32_t>()[j];
    packed.weight_sums[j] = static_cast<int32_t>(weight_sum);
    packed.zero_points[j] = zw;
    packed.rows_need_sums = packed.rows_need_sums || zw != 0;
  }
  return packed;
}

}  // namespace replicad
