#include "core/model/onnx_tensor.h"

#include <cstring>
#include <optional>
#include <type_traits>

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
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", dtype.status().message()));
  }
  Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has negative dims ", ShapeToString(shape)));
    }
  }
  // What the dims claim is checked against the data the proto holds before
  // anything is allocated (and zeroed): a model file of a few bytes must not
  // make the daemon allocate what its header claims.
  const TensorType type{*dtype, shape};
  const std::optional<size_t> bytes = CheckedByteSize(*dtype, shape);
  if (!bytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' ", TensorTypeToString(type),
                                                   " has more elements than can be addressed"));
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != *bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' ", TensorTypeToString(type), " needs ", *bytes,
                       " bytes of raw_data; received ", proto.raw_data().size()));
    }
    Tensor tensor = Tensor::Host(*dtype, shape);
    std::memcpy(tensor.raw_data(), proto.raw_data().data(), *bytes);
    return tensor;
  }
  // ONNX keeps float in float_data, int64 in int64_data and the narrower
  // integers and bool in int32_data, one element per entry.
  const int64_t count = static_cast<int64_t>(*bytes / DTypeSize(*dtype));
  const int64_t received = *dtype == DType::kFloat32 ? proto.float_data_size()
                           : *dtype == DType::kInt64 ? proto.int64_data_size()
                                                     : proto.int32_data_size();
  if (received != count) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' ", TensorTypeToString(type),
                                                   " needs ", count, " elements; received ",
                                                   received));
  }
  Tensor tensor = Tensor::Host(*dtype, shape);
  VisitDType(*dtype, [&](auto traits) {
    using T = typename decltype(traits)::Type;
    if constexpr (std::is_same_v<T, float>) {
      CopyTyped<float>(proto.float_data(), &tensor);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      CopyTyped<int64_t>(proto.int64_data(), &tensor);
    } else {
      CopyTyped<T>(proto.int32_data(), &tensor);
    }
  });
  if (*dtype == DType::kBool) {
    for (int64_t i = 0; i < count; ++i) tensor.data<uint8_t>()[i] = tensor.data<uint8_t>()[i] != 0;
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
