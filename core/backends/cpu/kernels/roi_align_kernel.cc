// RoiAlign (core/ops/roi_align_attributes.h): a loop over rois and channels,
// (roi, channel) planes in parallel on the slot's OpenMP team. Each bin's
// samples and their bilinear weights depend on the roi only, so they are
// computed once per roi and read for every channel. The arithmetic is
// core/ops/roi_align_samples.h's, which the CUDA kernel shares.
#include <string>
#include <utility>
#include <vector>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/roi_align_attributes.h"
#include "core/ops/roi_align_samples.h"

namespace replicad {
namespace {

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
    REPLICAD_RETURN_IF_ERROR(CheckRoiBatchIndices(node_, batch, a_.rois, images_));
    REPLICAD_RETURN_IF_ERROR(CheckRoiSamples(node_, rois, a_));
    const int64_t plane = a_.height * a_.width;
    const int64_t bins_per_roi = a_.output_height * a_.output_width;
    for (int64_t r = 0; r < a_.rois; ++r) {
      const RoiAlignBins bins = RoiAlignBinsOf(a_, rois + r * 4);
      const std::vector<RoiAlignSample> samples = SamplesOf(bins);
      const float* image = x + batch[r] * a_.channels * plane;
      float* out = y + r * a_.channels * bins_per_roi;
#pragma omp parallel for schedule(static) if (a_.channels * plane >= (1 << 15))
      for (int64_t c = 0; c < a_.channels; ++c) {
        PoolChannel(samples, bins.per_bin(), image + c * plane, out + c * bins_per_roi);
      }
    }
    return absl::OkStatus();
  }

 private:
  // The samples of every bin of one roi, bin after bin (bins.per_bin() each).
  std::vector<RoiAlignSample> SamplesOf(const RoiAlignBins& bins) const {
    std::vector<RoiAlignSample> samples;
    samples.reserve(a_.output_height * a_.output_width * bins.per_bin());
    for (int64_t ph = 0; ph < a_.output_height; ++ph)
      for (int64_t pw = 0; pw < a_.output_width; ++pw)
        for (int64_t iy = 0; iy < bins.grid_h; ++iy) {
          const float yy = RoiAlignSampleY(bins, ph, iy);
          for (int64_t ix = 0; ix < bins.grid_w; ++ix) {
            samples.push_back(RoiAlignBilinear(a_, yy, RoiAlignSampleX(bins, pw, ix)));
          }
        }
    return samples;
  }

  void PoolChannel(const std::vector<RoiAlignSample>& samples, int64_t per_bin, const float* x,
                   float* out) const {
    const int64_t bins = a_.output_height * a_.output_width;
    for (int64_t b = 0; b < bins; ++b) {
      const RoiAlignSample* s = samples.data() + b * per_bin;
      float value = RoiAlignStart(a_.max, per_bin);
      for (int64_t i = 0; i < per_bin; ++i) value = RoiAlignFold(a_.max, value, s[i], x);
      out[b] = RoiAlignFinish(a_.max, value, per_bin);
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
