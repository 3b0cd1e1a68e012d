#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/roi_align_attributes.h"
#include "core/ops/roi_align_samples.h"
#include "core/ops/shape_rules.h"

namespace replicad {

absl::StatusOr<RoiAlignAttributes> ParseRoiAlign(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 3, 3));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType rois, RequiredInput(spec, 1, "rois"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType indices, RequiredInput(spec, 2, "batch_indices"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x, {DType::kFloat32}));
  if (x.shape.size() != 4) {
    return NodeError(
        spec, absl::StrCat("input 0 'X' must be [N, C, H, W], received ", TensorTypeToString(x)));
  }
  if (rois.dtype != DType::kFloat32 || rois.shape.size() != 2 || rois.shape[1] != 4) {
    return NodeError(spec, absl::StrCat("input 1 'rois' must be float32 [num_rois, 4], received ",
                                        TensorTypeToString(rois)));
  }
  if (indices.dtype != DType::kInt64 || indices.shape != Shape{rois.shape[0]}) {
    return NodeError(spec, absl::StrCat("input 2 'batch_indices' must be int64 [", rois.shape[0],
                                        "] (one per roi), received ", TensorTypeToString(indices)));
  }
  RoiAlignAttributes a;
  a.channels = x.shape[1];
  a.height = x.shape[2];
  a.width = x.shape[3];
  a.rois = rois.shape[0];
  REPLICAD_ASSIGN_OR_RETURN(a.output_height, IntAttribute(spec, "output_height", 1));
  REPLICAD_ASSIGN_OR_RETURN(a.output_width, IntAttribute(spec, "output_width", 1));
  REPLICAD_ASSIGN_OR_RETURN(a.sampling_ratio, IntAttribute(spec, "sampling_ratio", 0));
  REPLICAD_ASSIGN_OR_RETURN(a.spatial_scale, FloatAttribute(spec, "spatial_scale", 1.0f));
  REPLICAD_ASSIGN_OR_RETURN(std::string mode, StringAttribute(spec, "mode", "avg"));
  REPLICAD_ASSIGN_OR_RETURN(std::string transformation,
                            StringAttribute(spec, "coordinate_transformation_mode",
                                            spec.opset >= 16 ? "half_pixel" : "output_half_pixel"));
  if (a.output_height < 1 || a.output_width < 1 || a.sampling_ratio < 0) {
    return NodeError(
        spec, absl::StrCat("attributes output_height and output_width must be "
                           "positive and sampling_ratio non-negative, received ",
                           a.output_height, ", ", a.output_width, " and ", a.sampling_ratio));
  }
  if (mode != "avg" && mode != "max") {
    return NodeError(spec,
                     absl::StrCat("attribute 'mode' must be avg or max, received '", mode, "'"));
  }
  if (transformation != "half_pixel" && transformation != "output_half_pixel") {
    return NodeError(spec, absl::StrCat("attribute 'coordinate_transformation_mode' must be "
                                        "half_pixel or output_half_pixel, received '",
                                        transformation, "'"));
  }
  if (!(a.spatial_scale > 0) || !std::isfinite(a.spatial_scale)) {
    return NodeError(spec, absl::StrCat("attribute 'spatial_scale' must be positive and finite, "
                                        "received ",
                                        a.spatial_scale));
  }
  if (a.sampling_ratio > 0 && a.sampling_ratio * a.sampling_ratio > kMaxRoiAlignSamplesPerBin) {
    return NodeError(spec, absl::StrCat("attribute 'sampling_ratio' must be at most 256 (",
                                        kMaxRoiAlignSamplesPerBin,
                                        " samples per output bin), received ", a.sampling_ratio));
  }
  if ((a.height == 0 || a.width == 0) && a.rois > 0 && a.channels > 0) {
    return NodeError(spec, absl::StrCat("input 0 'X' must have rows and columns to sample (H and "
                                        "W at least 1) for its ",
                                        a.rois, " rois; received ", TensorTypeToString(x)));
  }
  a.max = mode == "max";
  a.half_pixel = transformation == "half_pixel";
  return a;
}

absl::Status CheckRoiSamples(const std::string& node, const float* rois,
                             const RoiAlignAttributes& a) {
  if (a.sampling_ratio > 0) return absl::OkStatus();  // Bounded by ParseRoiAlign.
  for (int64_t r = 0; r < a.rois; ++r) {
    const RoiAlignBins bins = RoiAlignBinsOf(a, rois + r * 4);
    // Each factor first: their product could pass int64's range.
    const bool too_many = bins.grid_h > kMaxRoiAlignSamplesPerBin ||
                          bins.grid_w > kMaxRoiAlignSamplesPerBin ||
                          bins.per_bin() > kMaxRoiAlignSamplesPerBin;
    if (too_many) {
      const float* roi = rois + r * 4;
      return absl::InvalidArgumentError(
          absl::StrCat(node, ": input 1 'rois' row ", r, " ([", roi[0], ",", roi[1], ",", roi[2],
                       ",", roi[3], "]) takes ", bins.grid_h, " x ", bins.grid_w,
                       " samples per output bin; at most ", kMaxRoiAlignSamplesPerBin,
                       " (sampling_ratio 0 samples ceil(roi size / output size) "
                       "along each side)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRoiBatchIndices(const std::string& node, const int64_t* batch_indices,
                                  int64_t rois, int64_t images) {
  for (int64_t r = 0; r < rois; ++r) {
    if (batch_indices[r] < 0 || batch_indices[r] >= images) {
      return absl::InvalidArgumentError(absl::StrCat(node, ": input 2 'batch_indices' holds ",
                                                     batch_indices[r], " at position ", r,
                                                     "; expected an image of X's ", images));
    }
  }
  return absl::OkStatus();
}

absl::Status InferRoiAlign(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(RoiAlignAttributes a, ParseRoiAlign(*spec));
  spec->outputs = {
      TensorType{DType::kFloat32, {a.rois, a.channels, a.output_height, a.output_width}}};
  return absl::OkStatus();
}

}  // namespace replicad
