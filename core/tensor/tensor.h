#ifndef REPLICAD_CORE_TENSOR_TENSOR_H_
#define REPLICAD_CORE_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/tensor/buffer.h"
#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"

namespace replicad {

// A dense, row-major tensor: an element type, a concrete shape and a byte range
// of a shared Buffer. Copying a Tensor copies the handle, not the elements;
// slices are views into the same Buffer. Tensors are not synchronized: threads
// that write the same elements must order themselves (the device streams do).
class Tensor {
 public:
  Tensor() = default;

  // Views `buffer` from `byte_offset`; fails with InvalidArgument when the
  // buffer holds fewer bytes than dtype and shape need, or a dim is negative.
  static absl::StatusOr<Tensor> Create(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer,
                                       size_t byte_offset = 0);

  // A zero-filled tensor in host memory.
  static Tensor Host(DType dtype, Shape shape);

  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  const TensorType& type() const { return type_; }
  int rank() const { return static_cast<int>(type_.shape.size()); }
  int64_t num_elements() const { return NumElements(type_.shape); }
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype()); }
  const MemoryLocation& location() const { return buffer_->location(); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  void* raw_data() const { return static_cast<char*>(buffer_->data()) + byte_offset_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }

  // Rows [begin, end) along dim 0, sharing this tensor's Buffer (no copy).
  // OutOfRange unless 0 <= begin <= end <= dim 0; FailedPrecondition on rank 0.
  absl::StatusOr<Tensor> SliceRows(int64_t begin, int64_t end) const;

 private:
  Tensor(TensorType type, std::shared_ptr<Buffer> buffer, size_t byte_offset)
      : type_(std::move(type)), buffer_(std::move(buffer)), byte_offset_(byte_offset) {}

  TensorType type_;
  std::shared_ptr<Buffer> buffer_;
  size_t byte_offset_ = 0;
};

// Whether every element of a host tensor is zero (false, for bool); true
// for one without elements.
bool AllZero(const Tensor& tensor);

}  // namespace replicad

#endif  // REPLICAD_CORE_TENSOR_TENSOR_H_
