#include "core/tensor/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace replicad {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ",", [](std::string* out, int64_t d) {
                        absl::StrAppend(out, d == kAnyDim ? std::string("?") : absl::StrCat(d));
                      }), "]");
}

std::string TensorTypeToString(const TensorType& type) {
  return absl::StrCat(DTypeName(type.dtype), ShapeToString(type.shape));
}

}  // namespace replicad
