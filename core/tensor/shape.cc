#include "core/tensor/shape.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace replicad {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<size_t> CheckedByteSize(DType dtype, const Shape& shape) {
  uint64_t bytes = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      return std::nullopt;
    }
  }
  if (bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<size_t>(bytes);
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[",
                      absl::StrJoin(shape, ",",
                                    [](std::string* out, int64_t d) {
                                      absl::StrAppend(
                                          out, d == kAnyDim ? std::string("?") : absl::StrCat(d));
                                    }),
                      "]");
}

std::string TensorTypeToString(const TensorType& type) {
  return absl::StrCat(DTypeName(type.dtype), ShapeToString(type.shape));
}

size_t ByteSize(const TensorType& type) {
  return static_cast<size_t>(NumElements(type.shape)) * DTypeSize(type.dtype);
}

}  // namespace replicad
