#include <cmath>
#include <cstdint>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/layer_norm_attributes.h"

namespace replicad {
namespace {

// One pass over each row for its mean, one for its variance about that mean
// (two passes: exact where E[x^2] - E[x]^2 would cancel), one to write Y.
// Sums are double; `omp simd` lets them run in vector lanes, whose order of
// addition is then not the row's.
class LayerNormKernel : public Kernel {
 public:
  explicit LayerNormKernel(const LayerNormLayout& layout, int outputs)
      : layout_(layout), outputs_(outputs) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* bias = layout_.has_bias ? static_cast<const float*>(inputs[2]) : nullptr;
    float* y = static_cast<float*>(outputs[0]);
    float* mean_out = outputs_ > 1 ? static_cast<float*>(outputs[1]) : nullptr;
    float* inv_std_out = outputs_ > 2 ? static_cast<float*>(outputs[2]) : nullptr;
    const int64_t rows = layout_.rows;
    const int64_t cols = layout_.cols;
    const double epsilon = layout_.epsilon;
    // Rows are independent; threads pay off once there is more than a
    // wake-up's worth of them.
    constexpr int64_t kParallelMin = 1 << 14;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * cols;
      float* out = y + r * cols;
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < cols; ++c) sum += row[c];
      const double mean = cols > 0 ? sum / static_cast<double>(cols) : 0.0;
      double squares = 0;
#pragma omp simd reduction(+ : squares)
      for (int64_t c = 0; c < cols; ++c) {
        const double d = row[c] - mean;
        squares += d * d;
      }
      const double variance = cols > 0 ? squares / static_cast<double>(cols) : 0.0;
      const double inv_std = 1.0 / std::sqrt(variance + epsilon);
      const float mean_f = static_cast<float>(mean);
      const float inv_std_f = static_cast<float>(inv_std);
      if (bias != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
          out[c] = (row[c] - mean_f) * inv_std_f * scale[c] + bias[c];
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) out[c] = (row[c] - mean_f) * inv_std_f * scale[c];
      }
      if (mean_out != nullptr) mean_out[r] = mean_f;
      if (inv_std_out != nullptr) inv_std_out[r] = inv_std_f;
    }
    return absl::OkStatus();
  }

 private:
  LayerNormLayout layout_;
  int outputs_;
};

}  // namespace

KernelOrStatus MakeLayerNormalizationKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(LayerNormLayout layout, ParseLayerNormalization(spec));
  return std::make_unique<LayerNormKernel>(layout, static_cast<int>(spec.outputs.size()));
}

}  // namespace replicad
