#ifndef REPLICAD_CORE_OPS_ROI_ALIGN_SAMPLES_H_
#define REPLICAD_CORE_OPS_ROI_ALIGN_SAMPLES_H_

#include <cstdint>

#include "core/ops/exact_float.h"
#include "core/ops/host_device.h"
#include "core/ops/roi_align_attributes.h"

namespace replicad {

// RoiAlign's arithmetic (roi_align_attributes.h), written once for the CPU
// kernel and the CUDA kernel, which call these functions in the same order
// and so give the same bytes (exact_float.h says why the rounding agrees).
// It follows ONNX's reference and ONNX Runtime's kernel, boundary rules
// included. Pure functions; thread-safe.
//
// Output bin (ph, pw) of a roi over one (H, W) plane of X:
//   RoiAlignBins bins = RoiAlignBinsOf(a, roi);
//   float acc = RoiAlignStart(a.max, bins.per_bin());
//   for iy in [0, grid_h): for ix in [0, grid_w):
//     acc = RoiAlignFold(a.max, acc, RoiAlignBilinear(a, RoiAlignSampleY(bins, ph, iy),
//                                                      RoiAlignSampleX(bins, pw, ix)), plane);
//   out = RoiAlignFinish(a.max, acc, bins.per_bin());

// One roi's bins in X's coordinates: the first bin's corner, a bin's size,
// and the samples per bin along H and W (sampling_ratio, or with 0
// ceil(roi size / output size); none when that is not positive).
struct RoiAlignBins {
  float start_h = 0, start_w = 0;
  float bin_h = 0, bin_w = 0;
  int64_t grid_h = 0, grid_w = 0;

  REPLICAD_HOST_DEVICE int64_t per_bin() const {
    return (grid_h > 0 ? grid_h : 0) * (grid_w > 0 ? grid_w : 0);
  }
};

// `roi`: 4 floats, x1, y1, x2, y2 before spatial_scale.
REPLICAD_HOST_DEVICE inline RoiAlignBins RoiAlignBinsOf(const RoiAlignAttributes& a,
                                                        const float* roi) {
  using exact_float::Ceil, exact_float::Div, exact_float::Max, exact_float::Mul, exact_float::Sub,
      exact_float::TruncateToInt64;
  const float offset = a.half_pixel ? 0.5f : 0.0f;
  RoiAlignBins b;
  b.start_w = Sub(Mul(roi[0], a.spatial_scale), offset);
  b.start_h = Sub(Mul(roi[1], a.spatial_scale), offset);
  float roi_w = Sub(Sub(Mul(roi[2], a.spatial_scale), offset), b.start_w);
  float roi_h = Sub(Sub(Mul(roi[3], a.spatial_scale), offset), b.start_h);
  if (!a.half_pixel) {  // Opset 10's rois are at least one pixel.
    roi_w = Max(roi_w, 1.0f);
    roi_h = Max(roi_h, 1.0f);
  }
  const float out_h = static_cast<float>(a.output_height);
  const float out_w = static_cast<float>(a.output_width);
  b.bin_h = Div(roi_h, out_h);
  b.bin_w = Div(roi_w, out_w);
  // A NaN or infinite roi gets INT64_MIN samples per bin, that is none.
  b.grid_h = a.sampling_ratio > 0 ? a.sampling_ratio : TruncateToInt64(Ceil(Div(roi_h, out_h)));
  b.grid_w = a.sampling_ratio > 0 ? a.sampling_ratio : TruncateToInt64(Ceil(Div(roi_w, out_w)));
  return b;
}

// Sample iy of bin row ph: start + ph * bin + (iy + 0.5) * bin / grid.
REPLICAD_HOST_DEVICE inline float RoiAlignSampleY(const RoiAlignBins& b, int64_t ph, int64_t iy) {
  using exact_float::Add, exact_float::Div, exact_float::Mul;
  return Add(Add(b.start_h, Mul(static_cast<float>(ph), b.bin_h)),
             Div(Mul(Add(static_cast<float>(iy), 0.5f), b.bin_h), static_cast<float>(b.grid_h)));
}
REPLICAD_HOST_DEVICE inline float RoiAlignSampleX(const RoiAlignBins& b, int64_t pw, int64_t ix) {
  using exact_float::Add, exact_float::Div, exact_float::Mul;
  return Add(Add(b.start_w, Mul(static_cast<float>(pw), b.bin_w)),
             Div(Mul(Add(static_cast<float>(ix), 0.5f), b.bin_w), static_cast<float>(b.grid_w)));
}

// One bilinear sample: four offsets in an (H, W) plane and their weights.
// A sample outside [-1, H] x [-1, W] (or at NaN) keeps offsets 0 and weights
// 0: it still reads the plane's first element, times 0, as the CPU kernel
// always has (so a NaN or infinity there shows, on every backend alike).
struct RoiAlignSample {
  int64_t at[4] = {0, 0, 0, 0};
  float weight[4] = {0, 0, 0, 0};
};

REPLICAD_HOST_DEVICE inline RoiAlignSample RoiAlignBilinear(const RoiAlignAttributes& a, float yy,
                                                            float xx) {
  using exact_float::Max, exact_float::Mul, exact_float::Sub;
  RoiAlignSample s;
  const float height = static_cast<float>(a.height), width = static_cast<float>(a.width);
  if (!(yy >= -1.0f && yy <= height && xx >= -1.0f && xx <= width)) return s;
  yy = Max(yy, 0.0f);
  xx = Max(xx, 0.0f);
  int64_t y_low = static_cast<int64_t>(yy), x_low = static_cast<int64_t>(xx);
  int64_t y_high, x_high;
  if (y_low >= a.height - 1) {
    y_high = y_low = a.height - 1;
    yy = static_cast<float>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= a.width - 1) {
    x_high = x_low = a.width - 1;
    xx = static_cast<float>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const float ly = Sub(yy, static_cast<float>(y_low)), lx = Sub(xx, static_cast<float>(x_low));
  const float hy = Sub(1.0f, ly), hx = Sub(1.0f, lx);
  s.at[0] = y_low * a.width + x_low;
  s.at[1] = y_low * a.width + x_high;
  s.at[2] = y_high * a.width + x_low;
  s.at[3] = y_high * a.width + x_high;
  s.weight[0] = Mul(hy, hx);
  s.weight[1] = Mul(hy, lx);
  s.weight[2] = Mul(ly, hx);
  s.weight[3] = Mul(ly, lx);
  return s;
}

// A bin's value before its first sample: 0 for an average, -infinity for a
// max (0 when the bin has no samples).
REPLICAD_HOST_DEVICE inline float RoiAlignStart(bool max, int64_t per_bin) {
  return max && per_bin > 0 ? -exact_float::Infinity() : 0.0f;
}

// Folds one sample's four weighted corners into `acc`, corner 0 first: the
// largest (mode max, as ONNX Runtime; a NaN product is passed over) or the sum.
REPLICAD_HOST_DEVICE inline float RoiAlignFold(bool max, float acc, const RoiAlignSample& s,
                                               const float* plane) {
  using exact_float::Add, exact_float::Max, exact_float::Mul;
  for (int k = 0; k < 4; ++k) {
    const float term = Mul(s.weight[k], plane[s.at[k]]);
    acc = max ? Max(acc, term) : Add(acc, term);
  }
  return acc;
}

// The bin's output: the max as folded, or the sum over max(per_bin, 1). A
// NaN (from a NaN or infinity in X) is written as quiet_NaN's bits: x86 and
// CUDA arithmetic make NaNs of different bits, and the backends must agree.
REPLICAD_HOST_DEVICE inline float RoiAlignFinish(bool max, float acc, int64_t per_bin) {
  const float value =
      max ? acc : exact_float::Div(acc, static_cast<float>(per_bin > 1 ? per_bin : 1));
  return exact_float::IsNaN(value) ? exact_float::QuietNaN() : value;
}

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_ROI_ALIGN_SAMPLES_H_
