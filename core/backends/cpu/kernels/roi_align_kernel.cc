// RoiAlign (core/ops/roi_align_attributes.h): a loop over rois and channels,
// (roi, channel) planes in parallel on the slot's OpenMP team. Each bin's
// samples and their bilinear weights depend on the roi only, so they are
// computed once per roi and read for every channel; the arithmetic follows
// ONNX's reference (and ONNX Runtime's kernel), boundary rules included.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/roi_align_attributes.h"

namespace replicad {
namespace {

// One bilinear sample: four positions in an (H, W) plane and their weights
// (all 0 for a sample outside the plane, which then adds nothing).
struct Sample {
  int64_t at[4] = {0, 0, 0, 0};
  float weight[4] = {0, 0, 0, 0};
};

class RoiAlignKernel : public Kernel {
 public:
  // `images`: X's dim 0, which batch_indices must stay below.
  RoiAlignKernel(const RoiAlignAttributes& a, std::string node, int64_t images)
      : a_(a), node_(std::move(node)), images_(images) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* rois = static_cast<const float*>(inputs[1]);
    const int64_t* batch = static_cast<const int64_t*>(inputs[2]);
    float* y = static_cast<float*>(outputs[0]);
    const int64_t images = images_;
    for (int64_t r = 0; r < a_.rois; ++r) {
      if (batch[r] < 0 || batch[r] >= images) {
        return absl::InvalidArgumentError(absl::StrCat(node_, ": input 2 'batch_indices' holds ",
                                                       batch[r], " at position ", r,
                                                       "; expected an image of X's ", images));
      }
    }
    const int64_t plane = a_.height * a_.width;
    const int64_t bins = a_.output_height * a_.output_width;
    for (int64_t r = 0; r < a_.rois; ++r) {
      int64_t per_bin = 0;
      const std::vector<Sample> samples = SamplesOf(rois + r * 4, &per_bin);
      const float* image = x + batch[r] * a_.channels * plane;
      float* out = y + r * a_.channels * bins;
#pragma omp parallel for schedule(static) if (a_.channels * plane >= (1 << 15))
      for (int64_t c = 0; c < a_.channels; ++c) {
        PoolChannel(samples, per_bin, image + c * plane, out + c * bins);
      }
    }
    return absl::OkStatus();
  }

 private:
  // The samples of every bin of one roi, bin after bin (`per_bin` each).
  std::vector<Sample> SamplesOf(const float* roi, int64_t* per_bin) const {
    const float offset = a_.half_pixel ? 0.5f : 0.0f;
    const float start_w = roi[0] * a_.spatial_scale - offset;
    const float start_h = roi[1] * a_.spatial_scale - offset;
    float roi_w = roi[2] * a_.spatial_scale - offset - start_w;
    float roi_h = roi[3] * a_.spatial_scale - offset - start_h;
    if (!a_.half_pixel) {  // Opset 10's rois are at least one pixel.
      roi_w = std::max(roi_w, 1.0f);
      roi_h = std::max(roi_h, 1.0f);
    }
    const float bin_h = roi_h / static_cast<float>(a_.output_height);
    const float bin_w = roi_w / static_cast<float>(a_.output_width);
    const int64_t grid_h = a_.sampling_ratio > 0
                               ? a_.sampling_ratio
                               : static_cast<int64_t>(std::ceil(roi_h / a_.output_height));
    const int64_t grid_w = a_.sampling_ratio > 0
                               ? a_.sampling_ratio
                               : static_cast<int64_t>(std::ceil(roi_w / a_.output_width));
    *per_bin = std::max<int64_t>(grid_h, 0) * std::max<int64_t>(grid_w, 0);
    std::vector<Sample> samples;
    samples.reserve(a_.output_height * a_.output_width * *per_bin);
    for (int64_t ph = 0; ph < a_.output_height; ++ph)
      for (int64_t pw = 0; pw < a_.output_width; ++pw)
        for (int64_t iy = 0; iy < grid_h; ++iy) {
          const float yy = start_h + ph * bin_h + (iy + 0.5f) * bin_h / grid_h;
          for (int64_t ix = 0; ix < grid_w; ++ix) {
            const float xx = start_w + pw * bin_w + (ix + 0.5f) * bin_w / grid_w;
            samples.push_back(Bilinear(yy, xx));
          }
        }
    return samples;
  }

  Sample Bilinear(float yy, float xx) const {
    Sample s;
    const float height = static_cast<float>(a_.height), width = static_cast<float>(a_.width);
    if (!(yy >= -1.0f && yy <= height && xx >= -1.0f && xx <= width)) return s;  // NaN too.
    yy = std::max(yy, 0.0f);
    xx = std::max(xx, 0.0f);
    int64_t y_low = static_cast<int64_t>(yy), x_low = static_cast<int64_t>(xx);
    int64_t y_high, x_high;
    if (y_low >= a_.height - 1) {
      y_high = y_low = a_.height - 1;
      yy = static_cast<float>(y_low);
    } else {
      y_high = y_low + 1;
    }
    if (x_low >= a_.width - 1) {
      x_high = x_low = a_.width - 1;
      xx = static_cast<float>(x_low);
    } else {
      x_high = x_low + 1;
    }
    const float ly = yy - y_low, lx = xx - x_low, hy = 1 - ly, hx = 1 - lx;
    s.at[0] = y_low * a_.width + x_low;
    s.at[1] = y_low * a_.width + x_high;
    s.at[2] = y_high * a_.width + x_low;
    s.at[3] = y_high * a_.width + x_high;
    s.weight[0] = hy * hx;
    s.weight[1] = hy * lx;
    s.weight[2] = ly * hx;
    s.weight[3] = ly * lx;
    return s;
  }

  void PoolChannel(const std::vector<Sample>& samples, int64_t per_bin, const float* x,
                   float* out) const {
    const int64_t bins = a_.output_height * a_.output_width;
    for (int64_t b = 0; b < bins; ++b) {
      const Sample* s = samples.data() + b * per_bin;
      if (a_.max) {
        float best = per_bin > 0 ? -std::numeric_limits<float>::infinity() : 0.0f;
        for (int64_t i = 0; i < per_bin; ++i) {
          for (int k = 0; k < 4; ++k) best = std::max(best, s[i].weight[k] * x[s[i].at[k]]);
        }
        out[b] = best;
        continue;
      }
      float sum = 0;
      for (int64_t i = 0; i < per_bin; ++i) {
        for (int k = 0; k < 4; ++k) sum += s[i].weight[k] * x[s[i].at[k]];
      }
      out[b] = sum / static_cast<float>(std::max<int64_t>(per_bin, 1));
    }
  }

  RoiAlignAttributes a_;
  std::string node_;
  int64_t images_;
};

}  // namespace

KernelOrStatus MakeRoiAlignKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(RoiAlignAttributes a, ParseRoiAlign(spec));
  return std::unique_ptr<Kernel>(
      std::make_unique<RoiAlignKernel>(a, NodeLabel(spec), spec.inputs[0]->shape[0]));
}

}  // namespace replicad
