// Resize: nearest and linear interpolation with ONNX's coordinate
// transformation and rounding modes, as torchvision's segmentation and
// detection heads export them (F.interpolate: linear half_pixel for
// align_corners=False, align_corners, nearest asymmetric floor).
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/resize_attributes.h"
#include "core/ops/shape_rules.h"
#include "core/ops/value_input.h"

namespace replicad {
namespace {

constexpr int64_t kMaxOutputDim = int64_t{1} << 31;

// Where output coordinate `o` of an axis of `in` -> `out` elements lies in
// the input, by ONNX's coordinate_transformation_mode. `scale` is out / in,
// or the given scale; align_corners divides by the resized length before
// it is floored (in x scale), as ONNX's spec and reference do.
double SourceCoordinate(const std::string& mode, int64_t o, int64_t in, int64_t out, double scale) {
  if (mode == "align_corners") {
    const double resized = in * scale;
    return out == 1 || resized == 1.0 ? 0.0 : static_cast<double>(o) * (in - 1) / (resized - 1);
  }
  if (mode == "asymmetric") return o / scale;
  if (mode == "pytorch_half_pixel") return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
  // tf_half_pixel_for_nn: how the ONNX backend test data spells it.
  if (mode == "tf_half_pixel_for_nearest" || mode == "tf_half_pixel_for_nn") {
    return (o + 0.5) / scale;
  }
  if (mode == "half_pixel_symmetric") {
    const double adjustment = out / (scale * in);
    const double center = in / 2.0;
    const double offset = center * (1 - adjustment);
    return offset + (o + 0.5) / scale - 0.5;
  }
  return (o + 0.5) / scale - 0.5;  // half_pixel
}

int64_t NearestIndex(const std::string& mode, double x) {
  const double floor = std::floor(x);
  const double fraction = x - floor;
  if (mode == "floor") return static_cast<int64_t>(floor);
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(x));
  if (fraction == 0.5) {
    return static_cast<int64_t>(mode == "round_prefer_ceil" ? floor + 1 : floor);
  }
  return static_cast<int64_t>(std::round(x));
}

absl::StatusOr<std::vector<double>> FloatValues(const KernelSpec& spec, int index,
                                                const char* name) {
  REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, index, name));
  if (type.dtype != DType::kFloat32 || type.shape.size() != 1) {
    return NodeError(spec,
                     absl::StrCat("input ", index, " '", name, "' must be 1-D float32, received ",
                                  TensorTypeToString(type)));
  }
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* value, ValueInput(spec, index, name));
  return std::vector<double>(value->data<float>(), value->data<float>() + value->num_elements());
}

// The modes Resize's attributes name, checked.
struct ResizeModes {
  std::string mode, transform, nearest;
};
absl::StatusOr<ResizeModes> ParseResizeModes(const KernelSpec& spec, const TensorType& x) {
  ResizeModes modes;
  REPLICAD_ASSIGN_OR_RETURN(modes.mode, StringAttribute(spec, "mode", "nearest"));
  REPLICAD_ASSIGN_OR_RETURN(modes.transform,
                            StringAttribute(spec, "coordinate_transformation_mode", "half_pixel"));
  REPLICAD_ASSIGN_OR_RETURN(modes.nearest,
                            StringAttribute(spec, "nearest_mode", "round_prefer_floor"));
  const std::string& mode = modes.mode;
  const std::string& transform = modes.transform;
  const std::string& nearest = modes.nearest;
  REPLICAD_ASSIGN_OR_RETURN(int64_t antialias, IntAttribute(spec, "antialias", 0));
  REPLICAD_ASSIGN_OR_RETURN(std::string policy,
                            StringAttribute(spec, "keep_aspect_ratio_policy", "stretch"));
  if (mode == "cubic") return NodeUnimplemented(spec, "mode 'cubic' is not computed");
  if (mode != "nearest" && mode != "linear") {
    return NodeError(spec, absl::StrCat("attribute 'mode' must be nearest, linear or cubic, "
                                        "received '",
                                        mode, "'"));
  }
  if (transform == "tf_crop_and_resize") {
    return NodeUnimplemented(spec,
                             "coordinate_transformation_mode 'tf_crop_and_resize' is not "
                             "computed");
  }
  if (transform != "half_pixel" && transform != "pytorch_half_pixel" &&
      transform != "align_corners" && transform != "asymmetric" &&
      transform != "tf_half_pixel_for_nearest" && transform != "tf_half_pixel_for_nn" &&
      transform != "half_pixel_symmetric") {
    return NodeError(spec, absl::StrCat("attribute 'coordinate_transformation_mode' '", transform,
                                        "' is not one of ONNX's"));
  }
  if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" &&
      nearest != "ceil") {
    return NodeError(spec, absl::StrCat("attribute 'nearest_mode' must be round_prefer_floor, "
                                        "round_prefer_ceil, floor or ceil, received '",
                                        nearest, "'"));
  }
  if (antialias != 0) return NodeUnimplemented(spec, "attribute 'antialias' 1 is not computed");
  if (policy != "stretch") {
    return NodeUnimplemented(
        spec, absl::StrCat("keep_aspect_ratio_policy '", policy, "' is not computed"));
  }
  if (mode == "linear" && x.dtype != DType::kFloat32) {
    return NodeUnimplemented(
        spec, absl::StrCat("linear mode computes float32; received ", TensorTypeToString(x)));
  }
  return modes;
}

// The output's sizes and each dim's scale, from scales or sizes (input 2 or
// 3) over opset 18's axes (every dim otherwise).
absl::Status ParseResizeTargets(const KernelSpec& spec, const TensorType& x,
                                std::vector<double>* scales_out, std::vector<int64_t>* sizes_out) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  // Opset 18's axes: the dims scales and sizes name (all dims otherwise).
  std::vector<int64_t> axes(rank);
  for (int64_t d = 0; d < rank; ++d) axes[d] = d;
  if (spec.attributes->Has("axes")) {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> given, IntsAttribute(spec, "axes", {}));
    REPLICAD_ASSIGN_OR_RETURN(axes, NormalizeAxes(spec, given, rank, "attribute 'axes'"));
  }
  const int64_t named = static_cast<int64_t>(axes.size());
  std::vector<double> scales(rank, 1.0);
  std::vector<int64_t> sizes(x.shape.begin(), x.shape.end());
  const bool has_sizes = HasInput(spec, 3);
  if (has_sizes) {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> given, Int64ValueInput(spec, 3, "sizes"));
    if (static_cast<int64_t>(given.size()) != named) {
      return NodeError(spec, absl::StrCat("input 3 'sizes' must hold ", named, " sizes, received [",
                                          absl::StrJoin(given, ","), "]"));
    }
    for (int64_t i = 0; i < named; ++i) {
      if (given[i] < 0 || given[i] > kMaxOutputDim) {
        return NodeError(spec, absl::StrCat("input 3 'sizes' [", absl::StrJoin(given, ","),
                                            "] must hold sizes in [0, ", kMaxOutputDim, "]"));
      }
      sizes[axes[i]] = given[i];
      const int64_t in = x.shape[axes[i]];
      scales[axes[i]] = in == 0 ? 1.0 : static_cast<double>(static_cast<float>(given[i]) / in);
    }
  }
  std::vector<double> given_scales;
  if (HasInput(spec, 2)) {
    REPLICAD_ASSIGN_OR_RETURN(given_scales, FloatValues(spec, 2, "scales"));
  }
  if (!given_scales.empty() && has_sizes) {
    return NodeError(spec, "inputs 2 'scales' and 3 'sizes' are both given; ONNX takes one");
  }
  if (!given_scales.empty()) {
    if (static_cast<int64_t>(given_scales.size()) != named) {
      return NodeError(spec, absl::StrCat("input 2 'scales' must hold ", named,
                                          " scales, received ", given_scales.size()));
    }
    for (int64_t i = 0; i < named; ++i) {
      const double scale = given_scales[i];
      const double size = std::floor(x.shape[axes[i]] * scale);
      if (!(scale > 0) || !(size <= kMaxOutputDim)) {
        return NodeError(spec, absl::StrCat("input 2 'scales' must hold positive scales that give "
                                            "at most ",
                                            kMaxOutputDim, " elements a dim; received ", scale,
                                            " for dim ", axes[i]));
      }
      scales[axes[i]] = scale;
      sizes[axes[i]] = static_cast<int64_t>(size);
    }
  } else if (!has_sizes) {
    return NodeError(spec, "one of inputs 2 'scales' and 3 'sizes' must be given");
  }
  *scales_out = std::move(scales);
  *sizes_out = std::move(sizes);
  return absl::OkStatus();
}

// The read positions for `x` resized to `sizes` by `scales` (one of each per
// dim) with `modes`.
ResizeLayout Interpolate(const TensorType& x, const ResizeModes& modes,
                         const std::vector<double>& scales, const std::vector<int64_t>& sizes) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  ResizeLayout layout;
  layout.linear = modes.mode == "linear";
  layout.output_shape = sizes;
  layout.axes.resize(rank);
  for (int64_t d = 0; d < rank; ++d) {
    ResizeAxis& axis = layout.axes[d];
    axis.input = x.shape[d];
    axis.output = sizes[d];
    if (axis.input == 0) continue;
    const int64_t last = axis.input - 1;
    for (int64_t o = 0; o < axis.output; ++o) {
      const double source =
          SourceCoordinate(modes.transform, o, axis.input, axis.output, scales[d]);
      if (!layout.linear) {
        axis.low.push_back(std::clamp<int64_t>(NearestIndex(modes.nearest, source), 0, last));
        continue;
      }
      const double floor = std::floor(source);
      const int64_t low = static_cast<int64_t>(floor);
      axis.low.push_back(std::clamp<int64_t>(low, 0, last));
      axis.high.push_back(std::clamp<int64_t>(low + 1, 0, last));
      axis.weight.push_back(static_cast<float>(source - floor));
    }
  }
  return layout;
}

}  // namespace

absl::StatusOr<ResizeLayout> ParseResize(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 4));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  REPLICAD_ASSIGN_OR_RETURN(ResizeModes modes, ParseResizeModes(spec, x));
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  REPLICAD_RETURN_IF_ERROR(ParseResizeTargets(spec, x, &scales, &sizes));
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (x.shape[d] == 0 && sizes[d] != 0) {
      return NodeError(
          spec, absl::StrCat("input 0 'X' has no elements along dim ", d, ", so output dim ", d,
                             " must be 0; received ", sizes[d]));
    }
  }
  return Interpolate(x, modes, scales, sizes);
}

absl::StatusOr<ResizeLayout> ParseUpsample(const KernelSpec& spec) {
  const bool scales_are_input = spec.opset >= 9;
  REPLICAD_RETURN_IF_ERROR(
      CheckInputCount(spec, scales_are_input ? 2 : 1, scales_are_input ? 2 : 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  ResizeModes modes;
  REPLICAD_ASSIGN_OR_RETURN(modes.mode, StringAttribute(spec, "mode", "nearest"));
  if (modes.mode == "bilinear") modes.mode = "linear";  // Opset 7's spelling of it.
  if (modes.mode != "nearest" && modes.mode != "linear") {
    return NodeError(spec, absl::StrCat("attribute 'mode' must be nearest or linear, received '",
                                        modes.mode, "'"));
  }
  // Upsample is Resize with these fixed: x_in = x_out / scale, rounded down.
  modes.transform = "asymmetric";
  modes.nearest = "floor";
  std::vector<double> scales;
  if (scales_are_input) {
    REPLICAD_ASSIGN_OR_RETURN(scales, FloatValues(spec, 1, "scales"));
  } else {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<float> given, spec.attributes->GetFloats("scales"));
    scales.assign(given.begin(), given.end());
  }
  const char* what = scales_are_input ? "input 1 'scales'" : "attribute 'scales'";
  if (scales.size() != x.shape.size()) {
    return NodeError(spec, absl::StrCat(what, " must hold one scale per dim of X (", x.shape.size(),
                                        "), received ", scales.size()));
  }
  std::vector<int64_t> sizes(x.shape.size());
  for (size_t d = 0; d < scales.size(); ++d) {
    const double size = std::floor(x.shape[d] * scales[d]);
    if (!(scales[d] >= 1.0) || !(size <= kMaxOutputDim)) {
      return NodeError(
          spec, absl::StrCat(what, " must hold scales >= 1 that give at most ", kMaxOutputDim,
                             " elements a dim; received ", scales[d], " for dim ", d));
    }
    sizes[d] = static_cast<int64_t>(size);
  }
  return Interpolate(x, modes, scales, sizes);
}

absl::Status InferUpsample(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(ResizeLayout layout, ParseUpsample(*spec));
  spec->outputs = {TensorType{spec->inputs[0]->dtype, layout.output_shape}};
  return absl::OkStatus();
}

absl::Status InferResize(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(ResizeLayout layout, ParseResize(*spec));
  spec->outputs = {TensorType{spec->inputs[0]->dtype, layout.output_shape}};
  return absl::OkStatus();
}

}  // namespace replicad
