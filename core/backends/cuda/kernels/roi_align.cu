#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/roi_align_launch.h"
#include "core/ops/roi_align_samples.h"

namespace replicad {
namespace {

// Output element i is (roi, channel, ph, pw), row-major. Each thread works
// out its roi's bins again (a few float operations) rather than sharing them,
// and walks its bin's samples in the order the CPU kernel folds them.
__global__ void RoiAlignKernel(const float* x, const float* rois, const int64_t* batch_indices,
                               float* y, int64_t n, RoiAlignAttributes a, int64_t images) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t pw = i % a.output_width;
    const int64_t ph = (i / a.output_width) % a.output_height;
    const int64_t c = (i / (a.output_width * a.output_height)) % a.channels;
    const int64_t r = i / (a.output_width * a.output_height * a.channels);
    const int64_t image = batch_indices[r];
    if (image < 0 || image >= images) {
      y[i] = 0.0f;
      continue;
    }
    const float* plane = x + (image * a.channels + c) * a.height * a.width;
    const RoiAlignBins bins = RoiAlignBinsOf(a, rois + r * 4);
    float value = RoiAlignStart(a.max, bins.per_bin());
    for (int64_t iy = 0; iy < bins.grid_h; ++iy) {
      const float yy = RoiAlignSampleY(bins, ph, iy);
      for (int64_t ix = 0; ix < bins.grid_w; ++ix) {
        value = RoiAlignFold(a.max, value, RoiAlignBilinear(a, yy, RoiAlignSampleX(bins, pw, ix)),
                             plane);
      }
    }
    y[i] = RoiAlignFinish(a.max, value, bins.per_bin());
  }
}

}  // namespace

void LaunchRoiAlign(const float* x, const float* rois, const int64_t* batch_indices, float* y,
                    const RoiAlignAttributes& a, int64_t images, cudaStream_t stream) {
  const int64_t n = a.rois * a.channels * a.output_height * a.output_width;
  if (n == 0) return;
  RoiAlignKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, rois, batch_indices, y, n, a,
                                                                images);
}

}  // namespace replicad
