#include "core/tensor/tensor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace replicad {

absl::StatusOr<Tensor> Tensor::Create(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer,
                                      size_t byte_offset) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " has a negative dimension"));
    }
  }
  TensorType type{dtype, std::move(shape)};
  const std::optional<size_t> size = CheckedByteSize(dtype, type.shape);
  if (!size) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorTypeToString(type), " has more elements than can be addressed"));
  }
  const size_t needed = *size;
  if (buffer == nullptr || byte_offset > buffer->bytes() ||
      buffer->bytes() - byte_offset < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        TensorTypeToString(type), " needs ", needed, " bytes but the buffer holds ",
        buffer == nullptr ? 0 : buffer->bytes() - std::min(byte_offset, buffer->bytes()),
        " from offset ", byte_offset));
  }
  return Tensor(std::move(type), std::move(buffer), byte_offset);
}

Tensor Tensor::Host(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  return Tensor(TensorType{dtype, std::move(shape)}, Buffer::AllocateHost(bytes), 0);
}

absl::StatusOr<Tensor> Tensor::SliceRows(int64_t begin, int64_t end) const {
  if (rank() == 0) {
    return absl::FailedPreconditionError("cannot slice rows of a rank-0 tensor");
  }
  const int64_t rows = shape()[0];
  if (begin < 0 || begin > end || end > rows) {
    return absl::OutOfRangeError(
        absl::StrCat("rows [", begin, ", ", end, ") are outside [0, ", rows, ")"));
  }
  const size_t row_bytes = rows == 0 ? 0 : byte_size() / static_cast<size_t>(rows);
  Shape sliced = shape();
  sliced[0] = end - begin;
  return Tensor(TensorType{dtype(), std::move(sliced)}, buffer_,
                byte_offset_ + static_cast<size_t>(begin) * row_bytes);
}

bool AllZero(const Tensor& tensor) {
  return VisitDType(tensor.dtype(), [&](auto traits) {
    using T = typename decltype(traits)::Type;
    const T* data = tensor.data<T>();
    return std::all_of(data, data + tensor.num_elements(), [](T v) { return v == T(0); });
  });
}

}  // namespace replicad
