// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv
// (core/ops/quantize_attributes.h) in exact int32 arithmetic: operands are
// widened less their zero points, multiplied as int32 matrices (a
// convolution through im2col), and the sums written as int32 or
// requantized. Any combination of uint8 and int8 operands, per-tensor or
// per-channel parameters, and parameters the graph computes; the int8
// models of onnxruntime.quantization take oneDNN's int8 convolution instead
// where its conditions hold (int8_conv_kernel.cc), and MatMulInteger against
// int8 weights oneDNN's int8 matrix product (int8_matmul_kernel.cc).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/backends/cpu/kernels/integer_product.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/quantization_math.h"
#include "core/ops/quantize_attributes.h"
#include "core/tensor/shape.h"

namespace replicad {

void WidenLessZeroPoint(const void* values, DType dtype, int64_t count, int32_t zero_point,
                        int32_t* widened) {
  if (dtype == DType::kInt8) {
    const int8_t* in = static_cast<const int8_t*>(values);
    for (int64_t i = 0; i < count; ++i) widened[i] = in[i] - zero_point;
  } else {
    const uint8_t* in = static_cast<const uint8_t*>(values);
    for (int64_t i = 0; i < count; ++i) widened[i] = in[i] - zero_point;
  }
}

int32_t EightBitAt(const void* values, DType dtype, int64_t index) {
  if (values == nullptr) return 0;
  if (dtype == DType::kInt8) return static_cast<const int8_t*>(values)[index];
  return static_cast<const uint8_t*>(values)[index];
}

void Int32MatrixProduct(int64_t m, int64_t n, int64_t k, const int32_t* a, const int32_t* b,
                        int32_t* c) {
  // Column tiles, so that B's rows of one tile stay in cache while every
  // row of A passes over them.
  constexpr int64_t kTile = 256;
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (m * n * k >= (1 << 16))
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t i = 0; i < m; ++i) {
      const int64_t begin = tile * kTile;
      const int64_t width = std::min(kTile, n - begin);
      int32_t sums[kTile] = {};
      for (int64_t p = 0; p < k; ++p) {
        const int32_t factor = a[i * k + p];
        if (factor == 0) continue;
        const int32_t* row = b + p * n + begin;
        for (int64_t j = 0; j < width; ++j) sums[j] += factor * row[j];
      }
      std::copy(sums, sums + width, c + i * n + begin);
    }
  }
}

void ProductParameters::Read(const IntegerProduct& product, const void* const* inputs) {
  const IntegerProductInputs& at = product.inputs;
  a_zero_point = EightBitAt(at.a_zero_point >= 0 ? inputs[at.a_zero_point] : nullptr, product.a, 0);
  const void* b_zero_points = at.b_zero_point >= 0 ? inputs[at.b_zero_point] : nullptr;
  for (int64_t c = 0; c < channels; ++c) {
    b_zero_point[c] = EightBitAt(b_zero_points, product.b, b_zero_point_per_channel ? c : 0);
  }
  if (!product.requantized) return;
  const float a_scale = *static_cast<const float*>(inputs[at.a_scale]);
  const float* b_scales = static_cast<const float*>(inputs[at.b_scale]);
  const float y_scale = *static_cast<const float*>(inputs[at.y_scale]);
  for (int64_t c = 0; c < channels; ++c) {
    multiplier[c] = RequantizeMultiplier(a_scale, b_scales[b_scale_per_channel ? c : 0], y_scale);
  }
  y_zero_point = EightBitAt(inputs[at.y_zero_point], product.output, 0);
}

ProductParameters::ProductParameters(const KernelSpec& spec, const IntegerProduct& product,
                                     int64_t channels)
    : channels(channels), b_zero_point(channels), multiplier(channels) {
  const IntegerProductInputs& at = product.inputs;
  b_zero_point_per_channel = at.b_zero_point >= 0 && HasInput(spec, at.b_zero_point) &&
                             NumElements(spec.inputs[at.b_zero_point]->shape) == channels &&
                             channels > 1;
  b_scale_per_channel = product.requantized &&
                        NumElements(spec.inputs[at.b_scale]->shape) == channels && channels > 1;
}

void WriteProductRow(const int32_t* sums, int64_t count, DType output, const ProductParameters& p,
                     int64_t first_channel, bool channel_per_element, void* destination) {
  auto multiplier_at = [&](int64_t i) {
    return p.multiplier[first_channel + (channel_per_element ? i : 0)];
  };
  switch (output) {
    case DType::kInt32:
      std::copy(sums, sums + count, static_cast<int32_t*>(destination));
      break;
    case DType::kInt8: {
      int8_t* out = static_cast<int8_t*>(destination);
      for (int64_t i = 0; i < count; ++i) {
        out[i] = RequantizeSum<int8_t>(sums[i], multiplier_at(i), p.y_zero_point);
      }
      break;
    }
    default: {
      uint8_t* out = static_cast<uint8_t*>(destination);
      for (int64_t i = 0; i < count; ++i) {
        out[i] = RequantizeSum<uint8_t>(sums[i], multiplier_at(i), p.y_zero_point);
      }
      break;
    }
  }
}

namespace {

// A [.., M, K] times B [.., K, N], batch dims broadcast as MatMul's.
class IntegerMatMulKernel : public Kernel {
 public:
  IntegerMatMulKernel(const KernelSpec& spec, const IntegerMatMul& matmul)
      : product_(matmul.product),
        parameters_(spec, matmul.product, matmul.layout.b.back()),
        m_(matmul.layout.a[matmul.layout.a.size() - 2]),
        k_(matmul.layout.a.back()),
        n_(matmul.layout.b.back()) {
    // The A and B matrix of each output matrix, batch dims broadcast.
    const Shape& out = matmul.layout.padded_output;
    const size_t batch_rank = out.size() - 2;
    const int64_t batches = NumElements(Shape(out.begin(), out.begin() + batch_rank));
    for (int64_t index = 0; index < batches; ++index) {
      int64_t rest = index, a_index = 0, b_index = 0, a_stride = 1, b_stride = 1;
      for (size_t d = batch_rank; d-- > 0;) {
        const int64_t position = rest % out[d];
        rest /= out[d];
        if (matmul.layout.a[d] != 1) a_index += position * a_stride;
        if (matmul.layout.b[d] != 1) b_index += position * b_stride;
        a_stride *= matmul.layout.a[d];
        b_stride *= matmul.layout.b[d];
      }
      operands_.push_back({a_index, b_index});
    }
  }

  size_t workspace_bytes() const override { return (m_ * k_ + k_ * n_ + m_ * n_) * 4; }
  void SetWorkspace(void* workspace) override { workspace_ = static_cast<int32_t*>(workspace); }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    parameters_.Read(product_, inputs);
    int32_t* a = workspace_;
    int32_t* b = a + m_ * k_;
    int32_t* sums = b + k_ * n_;
    const char* a_bytes = static_cast<const char*>(inputs[product_.inputs.a]);
    const char* b_bytes = static_cast<const char*>(inputs[product_.inputs.b]);
    char* y = static_cast<char*>(outputs[0]);
    const size_t out_size = DTypeSize(product_.output);
    int64_t widened_b = -1;  // The B matrix `b` holds (a broadcast B is widened once).
    for (size_t index = 0; index < operands_.size(); ++index) {
      WidenLessZeroPoint(a_bytes + operands_[index].first * m_ * k_, product_.a, m_ * k_,
                         parameters_.a_zero_point, a);
      if (operands_[index].second != widened_b) {
        widened_b = operands_[index].second;
        // Rows less 0, then each column less its own zero point.
        WidenLessZeroPoint(b_bytes + widened_b * k_ * n_, product_.b, k_ * n_, 0, b);
        for (int64_t p = 0; p < k_; ++p) {
          for (int64_t j = 0; j < n_; ++j) b[p * n_ + j] -= parameters_.b_zero_point[j];
        }
      }
      Int32MatrixProduct(m_, n_, k_, a, b, sums);
      char* matrix = y + index * m_ * n_ * out_size;
      for (int64_t i = 0; i < m_; ++i) {
        WriteProductRow(sums + i * n_, n_, product_.output, parameters_, 0,
                        /*channel_per_element=*/true, matrix + i * n_ * out_size);
      }
    }
    return absl::OkStatus();
  }

 private:
  IntegerProduct product_;
  ProductParameters parameters_;
  int64_t m_, k_, n_;
  std::vector<std::pair<int64_t, int64_t>> operands_;  // A's and B's matrix per output matrix.
  int32_t* workspace_ = nullptr;
};

// x [N, C, H, W] convolved with w [M, C/group, kH, kW] through im2col.
class IntegerConvKernel : public Kernel {
 public:
  IntegerConvKernel(const KernelSpec& spec, const IntegerConv& conv)
      : product_(conv.product),
        parameters_(spec, conv.product, conv.conv.out_channels),
        conv_(conv.conv),
        x_shape_(spec.inputs[conv.product.inputs.a]->shape) {
    const Window2d& window = conv_.window;
    group_channels_ = x_shape_[1] / conv_.group;
    group_outputs_ = conv_.out_channels / conv_.group;
    columns_ = group_channels_ * window.kernel[0] * window.kernel[1];
    positions_ = window.output[0] * window.output[1];
  }

  size_t workspace_bytes() const override {
    return (conv_.out_channels * columns_ + columns_ * positions_ + group_outputs_ * positions_) *
           4;
  }
  void SetWorkspace(void* workspace) override { workspace_ = static_cast<int32_t*>(workspace); }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    parameters_.Read(product_, inputs);
    int32_t* weights = workspace_;
    int32_t* columns = weights + conv_.out_channels * columns_;
    int32_t* sums = columns + columns_ * positions_;
    const void* w = inputs[product_.inputs.b];
    const size_t w_size = DTypeSize(product_.b);
    for (int64_t oc = 0; oc < conv_.out_channels; ++oc) {
      WidenLessZeroPoint(static_cast<const char*>(w) + oc * columns_ * w_size, product_.b, columns_,
                         parameters_.b_zero_point[oc], weights + oc * columns_);
    }
    const int32_t* bias = product_.inputs.bias >= 0
                              ? static_cast<const int32_t*>(inputs[product_.inputs.bias])
                              : nullptr;
    const char* x = static_cast<const char*>(inputs[product_.inputs.a]);
    const size_t x_size = DTypeSize(product_.a);
    const size_t out_size = DTypeSize(product_.output);
    char* y = static_cast<char*>(outputs[0]);
    const int64_t plane = x_shape_[2] * x_shape_[3];
    for (int64_t image = 0; image < x_shape_[0]; ++image) {
      for (int64_t g = 0; g < conv_.group; ++g) {
        const char* group_x = x + (image * x_shape_[1] + g * group_channels_) * plane * x_size;
        Im2Col(group_x, parameters_.a_zero_point, columns);
        Int32MatrixProduct(group_outputs_, positions_, columns_,
                           weights + g * group_outputs_ * columns_, columns, sums);
        for (int64_t o = 0; o < group_outputs_; ++o) {
          const int64_t channel = g * group_outputs_ + o;
          int32_t* row = sums + o * positions_;
          if (bias != nullptr) {
            for (int64_t p = 0; p < positions_; ++p) row[p] += bias[channel];
          }
          WriteProductRow(row, positions_, product_.output, parameters_, channel,
                          /*channel_per_element=*/false,
                          y + ((image * conv_.out_channels + channel) * positions_) * out_size);
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  // columns [C/group * kH * kW, OH * OW] of one image's group, less the zero
  // point; padding reads as the zero point, so adds nothing.
  void Im2Col(const char* x, int32_t zero_point, int32_t* columns) const {
    const Window2d& window = conv_.window;
    const int64_t height = x_shape_[2], width = x_shape_[3];
    const int64_t kernel_h = window.kernel[0], kernel_w = window.kernel[1];
    const int64_t out_h = window.output[0], out_w = window.output[1];
    const size_t x_size = DTypeSize(product_.a);
#pragma omp parallel for schedule(static) if (columns_ * positions_ >= (1 << 14))
    for (int64_t column = 0; column < columns_; ++column) {
      const int64_t c = column / (kernel_h * kernel_w);
      const int64_t kh = column / kernel_w % kernel_h;
      const int64_t kw = column % kernel_w;
      int32_t* out = columns + column * positions_;
      for (int64_t oh = 0; oh < out_h; ++oh) {
        const int64_t h = oh * window.strides[0] - window.pads_begin[0] + kh * window.dilations[0];
        for (int64_t ow = 0; ow < out_w; ++ow) {
          const int64_t w =
              ow * window.strides[1] - window.pads_begin[1] + kw * window.dilations[1];
          int32_t value = 0;
          if (h >= 0 && h < height && w >= 0 && w < width) {
            value = EightBitAt(x + (c * height * width) * x_size, product_.a, h * width + w) -
                    zero_point;
          }
          out[oh * out_w + ow] = value;
        }
      }
    }
  }

  IntegerProduct product_;
  ProductParameters parameters_;
  ConvAttributes conv_;
  Shape x_shape_;
  int64_t group_channels_ = 0, group_outputs_ = 0, columns_ = 0, positions_ = 0;
  int32_t* workspace_ = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> MakeExactIntegerMatMulKernel(const KernelSpec& spec,
                                                     const IntegerMatMul& matmul) {
  return std::make_unique<IntegerMatMulKernel>(spec, matmul);
}

std::unique_ptr<Kernel> MakeExactIntegerConvKernel(const KernelSpec& spec,
                                                   const IntegerConv& conv) {
  return std::make_unique<IntegerConvKernel>(spec, conv);
}

}  // namespace replicad
