#ifndef REPLICAD_CORE_TENSOR_DTYPE_H_
#define REPLICAD_CORE_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace replicad {

// The element types the engine holds. The values are ONNX's
// TensorProto.DataType numbers, so a DType converts to and from ONNX by value.
// float32 is what models compute in; the integer types and bool are what
// graphs carry besides (token ids, masks, comparisons, shape arithmetic).
// A bool element is one byte, 0 or 1 as written by the engine; any non-zero
// byte read from a client or a file counts as true. float16 and bfloat16 are
// the interface of 16-bit models (half_float.h; such a model computes in
// float32 inside, core/model/half_float_widening.h): tensors hold them,
// Cast converts them, and copies move them; no arithmetic op takes them.
enum class DType : int {
  kFloat32 = 1,
  kUint8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kBFloat16 = 16,
};

// Every DType, in enum order.
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kUint8,   DType::kInt8,
                                       DType::kInt32,   DType::kInt64,   DType::kBool,
                                       DType::kFloat16, DType::kBFloat16};

// The C++ element type of a DType, as VisitDType hands it over (bool is held
// as uint8_t: a byte the engine does not trust to be 0 or 1; float16 and
// bfloat16 as uint16_t, their bit patterns: a visitor that computes must
// tell them apart by the DType, as Cast does, or refuse them).
template <typename T>
struct ElementType {
  using Type = T;
};

// Calls f(ElementType<T>{}) with `dtype`'s element type T; f's result is
// returned. f is instantiated for every T, so its body must compile for all.
template <typename F>
auto VisitDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kUint8:
    case DType::kBool:
      return f(ElementType<uint8_t>{});
    case DType::kInt8:
      return f(ElementType<int8_t>{});
    case DType::kInt32:
      return f(ElementType<int32_t>{});
    case DType::kInt64:
      return f(ElementType<int64_t>{});
    case DType::kFloat16:
    case DType::kBFloat16:
      return f(ElementType<uint16_t>{});
    case DType::kFloat32:
      break;
  }
  return f(ElementType<float>{});
}

// Whether the dtype is one of the integer types (not bool, not a float).
bool IsIntegerDType(DType dtype);

// Whether the dtype is float16 or bfloat16.
bool IsHalfFloatDType(DType dtype);

// Bytes per element.
size_t DTypeSize(DType dtype);

// "float32", "uint8", "int8", "int32", "int64", "bool", "float16" or
// "bfloat16": the names used in errors, the API and the CLI.
absl::string_view DTypeName(DType dtype);

// Fails with InvalidArgument naming the ONNX type (e.g. "FLOAT16 (10)") when the
// engine does not hold it.
absl::StatusOr<DType> DTypeFromOnnx(int onnx_data_type);

// Inverse of DTypeName; InvalidArgument for any other name, listing the names.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);

// The ONNX name of any TensorProto.DataType value ("FLOAT", "INT8", ...), for messages.
absl::string_view OnnxDataTypeName(int onnx_data_type);

}  // namespace replicad

#endif  // REPLICAD_CORE_TENSOR_DTYPE_H_
