#include "core/tensor/dtype.h"

#include "absl/strings/str_cat.h"

namespace replicad {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt64:
      return "int64";
  }
  return "invalid";
}

absl::string_view OnnxDataTypeName(int onnx_data_type) {
  static constexpr absl::string_view kNames[] = {
      "UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",  "INT16",
      "INT32",     "INT64",  "STRING",    "BOOL",       "FLOAT16", "DOUBLE",
      "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (onnx_data_type < 0 ||
      onnx_data_type >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return "UNKNOWN";
  }
  return kNames[onnx_data_type];
}

absl::StatusOr<DType> DTypeFromOnnx(int onnx_data_type) {
  switch (onnx_data_type) {
    case 1:
      return DType::kFloat32;
    case 7:
      return DType::kInt64;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported element type ", OnnxDataTypeName(onnx_data_type), " (", onnx_data_type,
          "); replicad computes with float32 (FLOAT) and int64 (INT64)"));
  }
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  if (name == "float32") return DType::kFloat32;
  if (name == "int64") return DType::kInt64;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", name, "'; expected float32 or int64"));
}

}  // namespace replicad
