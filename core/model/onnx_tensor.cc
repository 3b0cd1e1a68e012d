#include "core/model/onnx_tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace replicad {
namespace {

template <typename T, typename Field>
void CopyTyped(const Field& field, Tensor* tensor) {
  T* out = tensor->data<T>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field.Get(i));
}

}  // namespace

absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto) {
  const std::string name = proto.name().empty() ? "<unnamed>" : proto.name();
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", name, "' keeps its data in an external file; not supported"));
  }
  absl::StatusOr<DType> dtype = DTypeFromOnnx(proto.data_type());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", dtype.status().message()));
  }
  Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has negative dims ", ShapeToString(shape)));
    }
  }
  Tensor tensor = Tensor::Host(*dtype, shape);
  const int64_t count = tensor.num_elements();
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != tensor.byte_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' ", TensorTypeToString(tensor.type()), " needs ",
          tensor.byte_size(), " bytes of raw_data; received ", proto.raw_data().size()));
    }
    std::memcpy(tensor.raw_data(), proto.raw_data().data(), tensor.byte_size());
    return tensor;
  }
  const int64_t received =
      *dtype == DType::kFloat32 ? proto.float_data_size() : proto.int64_data_size();
  if (received != count) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' ",
                                                   TensorTypeToString(tensor.type()), " needs ",
                                                   count, " elements; received ", received));
  }
  if (*dtype == DType::kFloat32) {
    CopyTyped<float>(proto.float_data(), &tensor);
  } else {
    CopyTyped<int64_t>(proto.int64_data(), &tensor);
  }
  return tensor;
}

void TensorToOnnx(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto) {
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(static_cast<int>(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  proto->set_raw_data(tensor.raw_data(), tensor.byte_size());
}

}  // namespace replicad
