// MaxPool and AveragePool over X [N, C, D, H, W] (core/ops/conv_attributes.h,
// Pool3dAttributes): a loop over the output, one (image, channel) plane per
// iteration, planes in parallel on the slot's OpenMP team. Video models pool
// little (a stem's max pooling, a global average), so oneDNN's 3-D pooling,
// with its layouts and the NaN repair the 2-D kernel needs, is not worth
// its weight here. A window holding a NaN gives NaN, as PyTorch's does.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"

namespace replicad {
namespace {

// One spatial dim of the window: the input positions output `o` reads are
// o * stride - pad + k * dilation for k in [0, kernel); those inside
// [0, size) count, and so do the explicit pads for an average that includes
// them (not a ceil_mode window's overhang past pads_end).
struct Axis {
  int64_t size, kernel, stride, dilation, pad_begin, pad_end;

  int64_t Start(int64_t o) const { return o * stride - pad_begin; }
  // Taps of output `o` within [lo, hi).
  int64_t TapsWithin(int64_t o, int64_t lo, int64_t hi) const {
    int64_t n = 0;
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t at = Start(o) + k * dilation;
      n += at >= lo && at < hi;
    }
    return n;
  }
};

class Pool3dKernel : public Kernel {
 public:
  Pool3dKernel(const Pool3dAttributes& pool, const Shape& x)
      : max_(pool.max), include_pad_(pool.count_include_pad), planes_(x[0] * x[1]) {
    for (int d = 0; d < 3; ++d) {
      axes_[d] = Axis{x[2 + d],
                      pool.window.kernel[d],
                      pool.window.strides[d],
                      pool.window.dilations[d],
                      pool.window.pads_begin[d],
                      pool.window.pads_end[d]};
      out_[d] = pool.window.output[d];
    }
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    const int64_t in_plane = axes_[0].size * axes_[1].size * axes_[2].size;
    const int64_t out_plane = out_[0] * out_[1] * out_[2];
#pragma omp parallel for schedule(static) if (planes_ * in_plane >= (1 << 15))
    for (int64_t p = 0; p < planes_; ++p) {
      PoolPlane(x + p * in_plane, y + p * out_plane);
    }
    return absl::OkStatus();
  }

 private:
  void PoolPlane(const float* x, float* y) const {
    const Axis &ad = axes_[0], &ah = axes_[1], &aw = axes_[2];
    for (int64_t od = 0; od < out_[0]; ++od)
      for (int64_t oh = 0; oh < out_[1]; ++oh)
        for (int64_t ow = 0; ow < out_[2]; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          double sum = 0;
          bool nan = false;
          for (int64_t kd = 0; kd < ad.kernel; ++kd) {
            const int64_t d = ad.Start(od) + kd * ad.dilation;
            if (d < 0 || d >= ad.size) continue;
            for (int64_t kh = 0; kh < ah.kernel; ++kh) {
              const int64_t h = ah.Start(oh) + kh * ah.dilation;
              if (h < 0 || h >= ah.size) continue;
              const float* row = x + (d * ah.size + h) * aw.size;
              for (int64_t kw = 0; kw < aw.kernel; ++kw) {
                const int64_t w = aw.Start(ow) + kw * aw.dilation;
                if (w < 0 || w >= aw.size) continue;
                const float v = row[w];
                nan |= std::isnan(v);
                best = std::max(best, v);
                sum += v;
              }
            }
          }
          float& out = y[(od * out_[1] + oh) * out_[2] + ow];
          if (max_) {
            out = nan ? std::numeric_limits<float>::quiet_NaN() : best;
            continue;
          }
          out = static_cast<float>(sum / static_cast<double>(Divisor(od, oh, ow)));
        }
  }

  // Elements an average divides by: those of X in the window, or with
  // count_include_pad those within the explicit pads too.
  int64_t Divisor(int64_t od, int64_t oh, int64_t ow) const {
    int64_t n = 1;
    const int64_t o[3] = {od, oh, ow};
    for (int d = 0; d < 3; ++d) {
      const Axis& a = axes_[d];
      n *= include_pad_ ? a.TapsWithin(o[d], -a.pad_begin, a.size + a.pad_end)
                        : a.TapsWithin(o[d], 0, a.size);
    }
    return std::max<int64_t>(n, 1);
  }

  bool max_;
  bool include_pad_;
  int64_t planes_;
  Axis axes_[3];
  int64_t out_[3];
};

}  // namespace

KernelOrStatus MakePool3dKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Pool3dAttributes pool, ParsePool3dAttributes(spec));
  if (HasNativeInputs(spec)) return WithRowMajorInputs(spec, context, MakePool3dKernel);
  return std::unique_ptr<Kernel>(std::make_unique<Pool3dKernel>(pool, spec.inputs[0]->shape));
}

}  // namespace replicad
