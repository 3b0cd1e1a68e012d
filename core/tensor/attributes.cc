#include "core/tensor/attributes.h"

#include "absl/strings/str_cat.h"

namespace replicad {

template <typename T>
absl::StatusOr<T> Attributes::Get(const std::string& name, const char* type_name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
  }
  if (const T* value = std::get_if<T>(&it->second)) return *value;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", name, "' must be of type ", type_name));
}

absl::StatusOr<int64_t> Attributes::GetInt(const std::string& name) const {
  return Get<int64_t>(name, "INT");
}

absl::StatusOr<int64_t> Attributes::GetInt(const std::string& name, int64_t default_value) const {
  if (!Has(name)) return default_value;
  return Get<int64_t>(name, "INT");
}

absl::StatusOr<float> Attributes::GetFloat(const std::string& name, float default_value) const {
  if (!Has(name)) return default_value;
  return Get<float>(name, "FLOAT");
}

absl::StatusOr<std::string> Attributes::GetString(const std::string& name,
                                                  const std::string& default_value) const {
  if (!Has(name)) return default_value;
  return Get<std::string>(name, "STRING");
}

absl::StatusOr<std::vector<int64_t>> Attributes::GetInts(const std::string& name,
                                                         std::vector<int64_t> default_value) const {
  if (!Has(name)) return default_value;
  return Get<std::vector<int64_t>>(name, "INTS");
}

absl::StatusOr<std::vector<float>> Attributes::GetFloats(const std::string& name) const {
  return Get<std::vector<float>>(name, "FLOATS");
}

absl::StatusOr<Tensor> Attributes::GetTensor(const std::string& name) const {
  return Get<Tensor>(name, "TENSOR");
}

}  // namespace replicad
