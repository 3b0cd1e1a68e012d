#ifndef REPLICAD_CORE_TENSOR_DTYPE_H_
#define REPLICAD_CORE_TENSOR_DTYPE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace replicad {

// The element types the engine computes with. The values are ONNX's
// TensorProto.DataType numbers, so a DType converts to and from ONNX by value.
enum class DType : int {
  kFloat32 = 1,
  kInt64 = 7,
};

// Bytes per element.
size_t DTypeSize(DType dtype);

// "float32" or "int64": the names used in errors, the API and the CLI.
absl::string_view DTypeName(DType dtype);

// Fails with InvalidArgument naming the ONNX type (e.g. "FLOAT16 (10)") when the
// engine does not compute with it.
absl::StatusOr<DType> DTypeFromOnnx(int onnx_data_type);

// Inverse of DTypeName; InvalidArgument for any other name.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);

// The ONNX name of any TensorProto.DataType value ("FLOAT", "INT8", ...), for messages.
absl::string_view OnnxDataTypeName(int onnx_data_type);

}  // namespace replicad

#endif  // REPLICAD_CORE_TENSOR_DTYPE_H_
