#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/constant_value.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

template <typename T>
Tensor HostTensor(DType dtype, Shape shape, const std::vector<T>& values) {
  Tensor tensor = Tensor::Host(dtype, std::move(shape));
  if (!values.empty()) std::memcpy(tensor.raw_data(), values.data(), values.size() * sizeof(T));
  return tensor;
}

}  // namespace

absl::StatusOr<Tensor> ConstantValue(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 0, 0));
  const Attributes& attributes = *spec.attributes;
  for (const char* name : {"sparse_value", "value_string", "value_strings"}) {
    if (attributes.Has(name)) {
      return NodeUnimplemented(spec, absl::StrCat("attribute '", name,
                                                  "' is not supported; replicad computes with "
                                                  "dense float32 and int64 tensors"));
    }
  }
  int count = 0;
  for (const char* name : {"value", "value_float", "value_floats", "value_int", "value_ints"}) {
    count += attributes.Has(name) ? 1 : 0;
  }
  if (count != 1) {
    return NodeError(spec, absl::StrCat("expected exactly one of the attributes value, "
                                        "value_float, value_floats, value_int, value_ints; "
                                        "received ",
                                        count));
  }
  if (attributes.Has("value")) {
    absl::StatusOr<Tensor> value = attributes.GetTensor("value");
    if (!value.ok()) return NodeError(spec, value.status().message());
    if (value->location().kind != MemoryKind::kHost) {
      return NodeUnimplemented(
          spec, absl::StrCat("attribute 'value' lives in ",
                             MemoryLocationToString(value->location()), "; expected host memory"));
    }
    return *value;
  }
  if (attributes.Has("value_float")) {
    REPLICAD_ASSIGN_OR_RETURN(float value, FloatAttribute(spec, "value_float", 0.0f));
    return HostTensor(DType::kFloat32, {}, std::vector<float>{value});
  }
  if (attributes.Has("value_int")) {
    REPLICAD_ASSIGN_OR_RETURN(int64_t value, IntAttribute(spec, "value_int", 0));
    return HostTensor(DType::kInt64, {}, std::vector<int64_t>{value});
  }
  if (attributes.Has("value_ints")) {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> values, IntsAttribute(spec, "value_ints", {}));
    const int64_t size = static_cast<int64_t>(values.size());
    return HostTensor(DType::kInt64, {size}, values);
  }
  absl::StatusOr<std::vector<float>> values = attributes.GetFloats("value_floats");
  if (!values.ok()) return NodeError(spec, values.status().message());
  const int64_t size = static_cast<int64_t>(values->size());
  return HostTensor(DType::kFloat32, {size}, *values);
}

absl::Status InferConstant(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, ConstantValue(*spec));
  spec->outputs = {value.type()};
  return absl::OkStatus();
}

}  // namespace replicad
