// InstanceNormalization and GroupNormalization (core/ops/group_norm_attributes.h).
#include <cmath>
#include <cstdint>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/group_norm_attributes.h"

namespace replicad {
namespace {

// Each (sample, group) is one contiguous block of channels x spatial
// elements: its mean and variance in double, two passes (the variance of
// (x - mean), not E[x^2] - mean^2, which cancels badly), then the affine
// normalization per channel. Blocks run in parallel on the slot's team.
class GroupNormKernel : public Kernel {
 public:
  explicit GroupNormKernel(const GroupNormLayout& layout) : layout_(layout) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* bias = static_cast<const float*>(inputs[2]);
    float* y = static_cast<float*>(outputs[0]);
    const int64_t per_group = layout_.channels / layout_.groups;
    const int64_t spatial = layout_.spatial;
    const int64_t block = per_group * spatial;
    const int64_t blocks = layout_.batch * layout_.groups;
#pragma omp parallel for schedule(static) if (blocks * block >= (1 << 15))
    for (int64_t b = 0; b < blocks; ++b) {
      const float* in = x + b * block;
      float* out = y + b * block;
      double sum = 0.0;
      for (int64_t i = 0; i < block; ++i) sum += in[i];
      const double mean = block > 0 ? sum / static_cast<double>(block) : 0.0;
      double squares = 0.0;
      for (int64_t i = 0; i < block; ++i) {
        const double d = in[i] - mean;
        squares += d * d;
      }
      const double variance = block > 0 ? squares / static_cast<double>(block) : 0.0;
      const double inv_std = 1.0 / std::sqrt(variance + static_cast<double>(layout_.epsilon));
      const int64_t group = b % layout_.groups;
      for (int64_t c = 0; c < per_group; ++c) {
        const int64_t affine = layout_.affine_per_group ? group : group * per_group + c;
        const float a = static_cast<float>(inv_std * scale[affine]);
        const float shift = static_cast<float>(bias[affine] - mean * inv_std * scale[affine]);
        const float* in_c = in + c * spatial;
        float* out_c = out + c * spatial;
        for (int64_t i = 0; i < spatial; ++i) out_c[i] = in_c[i] * a + shift;
      }
    }
    return absl::OkStatus();
  }

 private:
  GroupNormLayout layout_;
};

}  // namespace

KernelOrStatus MakeGroupNormalizationKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(GroupNormLayout layout, ParseGroupNormalization(spec));
  return std::make_unique<GroupNormKernel>(layout);
}

}  // namespace replicad
