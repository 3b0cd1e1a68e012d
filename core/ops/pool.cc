#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {

namespace {

// MaxPool and AveragePool: X [N, C, H, W], a required kernel_shape, the
// window attributes and ceil_mode; `what` names the pooling in messages.
absl::StatusOr<Window2d> ParsePoolWindow(const KernelSpec& spec, absl::string_view what) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  // MaxPool takes int8 and uint8 from opset 12 (an int8 model's pooling).
  const bool max_pool = spec.op_type == "MaxPool" && spec.opset >= 12;
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(
      spec, 0, "X", x,
      max_pool ? std::initializer_list<DType>{DType::kFloat32, DType::kInt8, DType::kUint8}
               : std::initializer_list<DType>{DType::kFloat32}));
  REPLICAD_RETURN_IF_ERROR(CheckSpatial2d(spec, x, what));
  if (!spec.attributes->Has("kernel_shape")) {
    return NodeError(spec, "attribute 'kernel_shape' is required");
  }
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, IntsAttribute(spec, "kernel_shape", {}));
  if (kernel.size() != 2 || kernel[0] < 1 || kernel[1] < 1) {
    return NodeError(spec, absl::StrCat("attribute 'kernel_shape' must hold 2 positive values, "
                                        "received [",
                                        absl::StrJoin(kernel, ","), "]"));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t ceil_mode, IntAttribute(spec, "ceil_mode", 0));
  return ResolveWindow2d(spec, {x.shape[2], x.shape[3]}, {kernel[0], kernel[1]}, ceil_mode != 0);
}

bool IsRank5(const KernelSpec& spec) {
  return spec.inputs.size() == 1 && spec.inputs[0].has_value() && spec.inputs[0]->shape.size() == 5;
}

// The output type of a pooling of X [N, C, spatial...] over `output` dims.
TensorType PooledType(const KernelSpec& spec, const std::vector<int64_t>& output) {
  const Shape& x = spec.inputs[0]->shape;
  Shape y = {x[0], x[1]};
  y.insert(y.end(), output.begin(), output.end());
  return TensorType{DType::kFloat32, std::move(y)};
}

}  // namespace

absl::StatusOr<Pool3dAttributes> ParsePool3dAttributes(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(spec, 0, "X"));
  const bool max_pool = spec.op_type == "MaxPool";
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(
      spec, 0, "X", x, {DType::kFloat32},
      max_pool && spec.opset >= 12 ? std::initializer_list<DType>{DType::kInt8, DType::kUint8}
                                   : std::initializer_list<DType>{}));
  if (x.shape.size() != 5) {
    return NodeError(spec, absl::StrCat("input 0 'X' must be [N, C, D, H, W], received ",
                                        TensorTypeToString(x)));
  }
  if (!spec.attributes->Has("kernel_shape")) {
    return NodeError(spec, "attribute 'kernel_shape' is required");
  }
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, IntsAttribute(spec, "kernel_shape", {}));
  if (kernel.size() != 3 || *std::min_element(kernel.begin(), kernel.end()) < 1) {
    return NodeError(spec, absl::StrCat("attribute 'kernel_shape' must hold 3 positive values "
                                        "for X of rank 5, received [",
                                        absl::StrJoin(kernel, ","), "]"));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t ceil_mode, IntAttribute(spec, "ceil_mode", 0));
  Pool3dAttributes pool;
  pool.max = max_pool;
  REPLICAD_ASSIGN_OR_RETURN(pool.window, ResolveWindowNd(spec, {x.shape[2], x.shape[3], x.shape[4]},
                                                         kernel, ceil_mode != 0));
  const char* flag = max_pool ? "storage_order" : "count_include_pad";
  REPLICAD_ASSIGN_OR_RETURN(int64_t value, IntAttribute(spec, flag, 0));
  if (value != 0 && value != 1) {
    return NodeError(spec, absl::StrCat("attribute '", flag, "' must be 0 or 1, received ", value));
  }
  pool.count_include_pad = !max_pool && value == 1;
  return pool;
}

absl::StatusOr<Window2d> ParseMaxPoolAttributes(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParsePoolWindow(spec, "max pooling"));
  REPLICAD_ASSIGN_OR_RETURN(int64_t storage_order, IntAttribute(spec, "storage_order", 0));
  if (storage_order != 0 && storage_order != 1) {
    return NodeError(
        spec, absl::StrCat("attribute 'storage_order' must be 0 or 1, received ", storage_order));
  }
  return window;
}

absl::Status InferMaxPool(KernelSpec* spec) {
  if (IsRank5(*spec)) {
    REPLICAD_ASSIGN_OR_RETURN(Pool3dAttributes pool, ParsePool3dAttributes(*spec));
    spec->outputs = {PooledType(*spec, pool.window.output)};
    return absl::OkStatus();
  }
  REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(*spec));
  const Shape& x = spec->inputs[0]->shape;
  spec->outputs = {
      TensorType{spec->inputs[0]->dtype, {x[0], x[1], window.output[0], window.output[1]}}};
  return absl::OkStatus();
}

absl::StatusOr<AveragePoolAttributes> ParseAveragePoolAttributes(const KernelSpec& spec) {
  AveragePoolAttributes pool;
  REPLICAD_ASSIGN_OR_RETURN(pool.window, ParsePoolWindow(spec, "average pooling"));
  REPLICAD_ASSIGN_OR_RETURN(int64_t count_include_pad, IntAttribute(spec, "count_include_pad", 0));
  if (count_include_pad != 0 && count_include_pad != 1) {
    return NodeError(spec, absl::StrCat("attribute 'count_include_pad' must be 0 or 1, received ",
                                        count_include_pad));
  }
  pool.count_include_pad = count_include_pad == 1;
  return pool;
}

absl::Status InferAveragePool(KernelSpec* spec) {
  if (IsRank5(*spec)) {
    REPLICAD_ASSIGN_OR_RETURN(Pool3dAttributes pool3d, ParsePool3dAttributes(*spec));
    spec->outputs = {PooledType(*spec, pool3d.window.output)};
    return absl::OkStatus();
  }
  REPLICAD_ASSIGN_OR_RETURN(AveragePoolAttributes pool, ParseAveragePoolAttributes(*spec));
  const Shape& x = spec->inputs[0]->shape;
  spec->outputs = {
      TensorType{DType::kFloat32, {x[0], x[1], pool.window.output[0], pool.window.output[1]}}};
  return absl::OkStatus();
}

namespace {

// GlobalAveragePool and GlobalMaxPool: [N, C, spatial...] to [N, C, 1...].
absl::Status InferGlobalPool(KernelSpec* spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType x, RequiredInput(*spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "X", x, {DType::kFloat32}));
  if (x.shape.size() < 3) {
    return NodeError(*spec, absl::StrCat("input 0 'X' must be [N, C, spatial...], received ",
                                         TensorTypeToString(x)));
  }
  for (size_t i = 2; i < x.shape.size(); ++i) {
    if (x.shape[i] == 0) {
      return NodeError(*spec, absl::StrCat("input 0 'X' has an empty spatial dim, so its "
                                           "pool is undefined; received ",
                                           TensorTypeToString(x)));
    }
  }
  Shape out(x.shape.size(), 1);
  out[0] = x.shape[0];
  out[1] = x.shape[1];
  spec->outputs = {TensorType{DType::kFloat32, std::move(out)}};
  return absl::OkStatus();
}

}  // namespace

absl::Status InferGlobalAveragePool(KernelSpec* spec) { return InferGlobalPool(spec); }

absl::Status InferGlobalMaxPool(KernelSpec* spec) { return InferGlobalPool(spec); }

}  // namespace replicad
