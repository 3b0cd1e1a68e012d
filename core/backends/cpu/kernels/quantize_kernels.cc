// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear
// (core/ops/quantize_attributes.h): elementwise loops over [outer, channels,
// inner], rows in parallel on the slot's OpenMP team. Scales and zero points
// are read on every run, since a graph may compute them (DynamicQuantizeLinear
// feeding a MatMulInteger).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/backends/cpu/kernels/avx512.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/quantization_math.h"
#include "core/ops/quantize_attributes.h"
#include "core/tensor/shape.h"

namespace replicad {
namespace {

// Rows this long or more split across the team.
constexpr int64_t kParallelElements = 1 << 14;

// Zero point `index` of `zero_points` (nullptr: absent, 0) of type Q.
template <typename Q>
int32_t ZeroPointAt(const void* zero_points, int64_t index) {
  return zero_points == nullptr ? 0 : static_cast<const Q*>(zero_points)[index];
}

// out[i] = QuantizeValue(in[i], scale, zero_point): sixteen at a time with
// AVX-512 (the same division, rounding and saturation, NaN included: the
// max against the lowest value returns it for NaN), the rest one by one.
template <typename Q>
__attribute__((target("avx512f"))) int64_t QuantizeRowAvx512(const float* in, int64_t count,
                                                             float scale, int32_t zero_point,
                                                             Q* out) {
  const __m512 divisor = _mm512_set1_ps(scale);
  const __m512 shift = _mm512_set1_ps(static_cast<float>(zero_point));
  const __m512 lowest = _mm512_set1_ps(static_cast<float>(std::numeric_limits<Q>::lowest()));
  const __m512 highest = _mm512_set1_ps(static_cast<float>(std::numeric_limits<Q>::max()));
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 v = _mm512_div_ps(_mm512_loadu_ps(in + i), divisor);
    v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                      shift);
    v = _mm512_min_ps(_mm512_max_ps(v, lowest), highest);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  return i;
}

template <typename Q>
void QuantizeRow(const float* in, int64_t count, float scale, int32_t zero_point, Q* out) {
  int64_t i = HasAvx512() ? QuantizeRowAvx512(in, count, scale, zero_point, out) : 0;
  for (; i < count; ++i) out[i] = QuantizeValue<Q>(in[i], scale, zero_point);
}

// out[i] = (in[i] - zero_point) * scale, sixteen at a time with AVX-512 for
// 8-bit values.
template <typename Q>
__attribute__((target("avx512f"))) int64_t DequantizeRowAvx512(const Q* in, int64_t count,
                                                               float scale, int32_t zero_point,
                                                               float* out) {
  const __m512 factor = _mm512_set1_ps(scale);
  const __m512i shift = _mm512_set1_epi32(zero_point);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m512i widened =
        std::is_signed_v<Q> ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
    _mm512_storeu_ps(out + i,
                     _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(widened, shift)), factor));
  }
  return i;
}

template <typename Q>
void DequantizeRow(const Q* in, int64_t count, float scale, int32_t zero_point, float* out) {
  int64_t i = 0;
  if constexpr (sizeof(Q) == 1) {
    if (HasAvx512()) i = DequantizeRowAvx512(in, count, scale, zero_point, out);
  }
  for (; i < count; ++i) out[i] = DequantizeValue(static_cast<int32_t>(in[i]), scale, zero_point);
}

// The parameter index of channel c: every channel's own, or the one for all.
inline int64_t ParameterOf(const QuantizationAxis& layout, int64_t c) {
  return layout.channels > 1 ? c : 0;
}

// QuantizeLinear (float32 to Q) or DequantizeLinear (Q to float32): a row of
// `inner` values per (outer, channel) index, with that channel's parameters.
template <typename Q, bool kQuantize>
class LinearQuantizationKernel : public Kernel {
 public:
  using From = std::conditional_t<kQuantize, float, Q>;
  using To = std::conditional_t<kQuantize, Q, float>;

  LinearQuantizationKernel(const QuantizationAxis& layout, bool has_zero_point)
      : layout_(layout), has_zero_point_(has_zero_point) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const From* x = static_cast<const From*>(inputs[0]);
    const float* scales = static_cast<const float*>(inputs[1]);
    // A node of two inputs is handed two pointers.
    const void* zero_points = has_zero_point_ ? inputs[2] : nullptr;
    To* y = static_cast<To*>(outputs[0]);
    const QuantizationAxis layout = layout_;
    const int64_t rows = layout.outer * layout.channels;
#pragma omp parallel for schedule(static) if (rows * layout.inner >= kParallelElements)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t parameter = ParameterOf(layout, row % layout.channels);
      const float scale = scales[parameter];
      const int32_t zero_point = ZeroPointAt<Q>(zero_points, parameter);
      if constexpr (kQuantize) {
        QuantizeRow(x + row * layout.inner, layout.inner, scale, zero_point,
                    y + row * layout.inner);
      } else {
        DequantizeRow(x + row * layout.inner, layout.inner, scale, zero_point,
                      y + row * layout.inner);
      }
    }
    return absl::OkStatus();
  }

 private:
  QuantizationAxis layout_;
  bool has_zero_point_;
};

// The smallest and largest of `count` values, NaN left out (an all-NaN run
// gives +inf and -inf), sixteen at a time with AVX-512: its min and max
// return their second operand, the running value, where the first is NaN.
__attribute__((target("avx512f"))) std::pair<float, float> RangeOfAvx512(const float* x,
                                                                         int64_t count) {
  __m512 low = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 high = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    low = _mm512_min_ps(v, low);
    high = _mm512_max_ps(v, high);
  }
  float l = _mm512_reduce_min_ps(low), h = _mm512_reduce_max_ps(high);
  for (; i < count; ++i) {
    l = std::fmin(l, x[i]);
    h = std::fmax(h, x[i]);
  }
  return {l, h};
}

std::pair<float, float> RangeOf(const float* x, int64_t count) {
  if (HasAvx512()) return RangeOfAvx512(x, count);
  float low = std::numeric_limits<float>::infinity();
  float high = -low;
  for (int64_t i = 0; i < count; ++i) {
    low = std::fmin(low, x[i]);
    high = std::fmax(high, x[i]);
  }
  return {low, high};
}

// y = QuantizeLinear(x, scale, zero_point) to uint8 with the scale and zero
// point that map [min(x, 0), max(x, 0)] onto [0, 255] (ONNX's formula; a
// tensor of zeros gets scale 1, as ONNX Runtime gives it). NaNs are left out
// of the range and quantize to 0.
class DynamicQuantizeLinearKernel : public Kernel {
 public:
  explicit DynamicQuantizeLinearKernel(int64_t count) : count_(count) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    float low = 0.0f;
    float high = 0.0f;
    const int64_t count = count_;
    // Chunks, each one vector loop, then one reduction over the team.
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) reduction(min : low) reduction(max : high) if (chunks > 1)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t begin = chunk * kChunk;
      const std::pair<float, float> range = RangeOf(x + begin, std::min(kChunk, count - begin));
      low = std::min(low, range.first);
      high = std::max(high, range.second);
    }
    const float scale = DynamicQuantizationScale(low, high);
    const uint8_t zero_point = DynamicQuantizationZeroPoint(low, scale);
    uint8_t* y = static_cast<uint8_t*>(outputs[0]);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t begin = chunk * kChunk;
      QuantizeRow(x + begin, std::min(kChunk, count - begin), scale, zero_point, y + begin);
    }
    *static_cast<float*>(outputs[1]) = scale;
    *static_cast<uint8_t*>(outputs[2]) = zero_point;
    return absl::OkStatus();
  }

 private:
  int64_t count_;
};

}  // namespace

KernelOrStatus MakeQuantizeLinearKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(LinearQuantization q, ParseQuantizeLinear(spec));
  if (q.quantized == DType::kInt8) {
    return std::make_unique<LinearQuantizationKernel<int8_t, true>>(q.layout, q.has_zero_point);
  }
  return std::make_unique<LinearQuantizationKernel<uint8_t, true>>(q.layout, q.has_zero_point);
}

KernelOrStatus MakeDequantizeLinearKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(LinearQuantization q, ParseDequantizeLinear(spec));
  switch (q.quantized) {
    case DType::kInt8:
      return std::make_unique<LinearQuantizationKernel<int8_t, false>>(q.layout, q.has_zero_point);
    case DType::kInt32:
      return std::make_unique<LinearQuantizationKernel<int32_t, false>>(q.layout, q.has_zero_point);
    default:
      return std::make_unique<LinearQuantizationKernel<uint8_t, false>>(q.layout, q.has_zero_point);
  }
}

KernelOrStatus MakeDynamicQuantizeLinearKernel(const KernelSpec& spec, CpuKernelContext&) {
  return std::make_unique<DynamicQuantizeLinearKernel>(NumElements(spec.inputs[0]->shape));
}

}  // namespace replicad
