#ifndef REPLICAD_CORE_OPS_ROI_ALIGN_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_ROI_ALIGN_ATTRIBUTES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// RoiAlign (opsets 10 and 16; detection heads: Faster and Mask R-CNN): X [N,
// C, H, W] float32, rois [R, 4] float32 (x1, y1, x2, y2 in X's coordinates
// times 1 / spatial_scale), batch_indices [R] int64 (which image each roi
// reads; checked per request); Y [R, C, output_height, output_width]. Each
// output bin averages (mode "avg") or takes the largest of (mode "max", as
// ONNX Runtime: the largest weighted corner of each sample) sampling_ratio
// x sampling_ratio bilinear samples (0: ceil(roi size / output size) per
// roi). coordinate_transformation_mode "half_pixel" (opset 16's default)
// shifts the rois by half a pixel; "output_half_pixel" (opset 10's only
// form) does not, and makes rois at least 1 x 1. The arithmetic, shared by
// every backend: roi_align_samples.h.
struct RoiAlignAttributes {
  int64_t channels = 0, height = 0, width = 0;
  int64_t rois = 0;
  int64_t output_height = 1, output_width = 1;
  int64_t sampling_ratio = 0;
  float spatial_scale = 1.0f;
  bool max = false;
  bool half_pixel = true;
};

// InvalidArgument naming the node and the input or attribute otherwise,
// among them an X without rows or columns (H or W 0) for a non-empty Y, and
// a sampling_ratio whose samples per bin pass kMaxRoiAlignSamplesPerBin.
absl::StatusOr<RoiAlignAttributes> ParseRoiAlign(const KernelSpec& spec);

// The most bilinear samples one output bin takes (a 256 x 256 grid): a
// detection head's rois, on feature maps, take tens to hundreds. One thread
// computes a bin on a GPU slot, so a request's roi of 1e12 pixels under
// sampling_ratio 0 would otherwise occupy it for hours (and a CPU slot's
// table of samples would not fit in memory).
inline constexpr int64_t kMaxRoiAlignSamplesPerBin = int64_t{1} << 16;

// The check every backend makes of a request's rois (`a.rois` of them, 4
// floats each) before it samples X: InvalidArgument "<node>: input 1 'rois'
// row <r> ([x1,y1,x2,y2]) takes <n> samples per output bin; at most 65536"
// for the first roi whose adaptive grid (sampling_ratio 0) passes
// kMaxRoiAlignSamplesPerBin; OK otherwise (a NaN or infinite roi takes none).
absl::Status CheckRoiSamples(const std::string& node, const float* rois,
                             const RoiAlignAttributes& a);

// The check every backend makes of a request's batch_indices (`rois` of
// them) before it reads X: InvalidArgument "<node>: input 2 'batch_indices'
// holds <value> at position <r>; expected an image of X's <images>" for the
// first outside [0, images), OK otherwise. `node` is NodeLabel's.
absl::Status CheckRoiBatchIndices(const std::string& node, const int64_t* batch_indices,
                                  int64_t rois, int64_t images);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_ROI_ALIGN_ATTRIBUTES_H_
