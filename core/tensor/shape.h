#ifndef REPLICAD_CORE_TENSOR_SHAPE_H_
#define REPLICAD_CORE_TENSOR_SHAPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"

namespace replicad {

// Dimensions, outermost first. In a model's signature a dimension of kAnyDim is
// not fixed (ONNX dim_param or a missing dim_value); a concrete shape has none.
using Shape = std::vector<int64_t>;
inline constexpr int64_t kAnyDim = -1;

// Product of the dimensions; 1 for rank 0. The shape must be concrete.
int64_t NumElements(const Shape& shape);

// The bytes of a `dtype` tensor of `shape`, or nullopt when a dimension is
// negative or the count overflows: for shapes that come from a request, which
// may claim anything (a wrapped product would pass a byte-count check).
std::optional<size_t> CheckedByteSize(DType dtype, const Shape& shape);

// "[8,1,28,28]"; kAnyDim prints as "?".
std::string ShapeToString(const Shape& shape);

// A value's element type and shape, as shape inference and kernels see it.
struct TensorType {
  DType dtype = DType::kFloat32;
  Shape shape;

  bool operator==(const TensorType& other) const {
    return dtype == other.dtype && shape == other.shape;
  }
};

// "float32[8,10]".
std::string TensorTypeToString(const TensorType& type);

// Bytes of a row-major tensor of `type` (shapes the engine made, which fit).
size_t ByteSize(const TensorType& type);

}  // namespace replicad

#endif  // REPLICAD_CORE_TENSOR_SHAPE_H_
