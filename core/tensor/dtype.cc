#include "core/tensor/dtype.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace replicad {

bool IsIntegerDType(DType dtype) {
  return dtype == DType::kUint8 || dtype == DType::kInt8 || dtype == DType::kInt32 ||
         dtype == DType::kInt64;
}

bool IsHalfFloatDType(DType dtype) { return dtype == DType::kFloat16 || dtype == DType::kBFloat16; }

size_t DTypeSize(DType dtype) {
  return VisitDType(dtype, [](auto traits) { return sizeof(typename decltype(traits)::Type); });
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kUint8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "invalid";
}

namespace {

std::string DTypeNameList() {
  std::string names;
  for (DType dtype : kAllDTypes) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", DTypeName(dtype));
  }
  return names;
}

}  // namespace

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
  for (DType dtype : kAllDTypes) {
    if (static_cast<int>(dtype) == onnx_data_type) return dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported element type ", OnnxDataTypeName(onnx_data_type), " (", onnx_data_type,
      "); replicad holds FLOAT (float32), FLOAT16, BFLOAT16, UINT8, INT8, INT32, INT64 and "
      "BOOL"));
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", name, "'; expected one of ", DTypeNameList()));
}

}  // namespace replicad
