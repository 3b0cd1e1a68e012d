#ifndef REPLICAD_CORE_MODEL_ONNX_TENSOR_H_
#define REPLICAD_CORE_MODEL_ONNX_TENSOR_H_

#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// Converts an ONNX TensorProto (raw_data or the typed repeated fields) into a
// host Tensor. InvalidArgument naming the tensor for an unsupported element
// type, dims whose size overflows, or a byte count that does not match its
// dims (checked before anything is allocated); Unimplemented for external data.
absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto);

// Writes a host tensor as a TensorProto with raw_data (little-endian).
void TensorToOnnx(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_ONNX_TENSOR_H_
