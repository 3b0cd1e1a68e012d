#ifndef REPLICAD_CORE_TENSOR_ATTRIBUTES_H_
#define REPLICAD_CORE_TENSOR_ATTRIBUTES_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"

namespace replicad {

// One node attribute, as ONNX defines them (INT, FLOAT, STRING, INTS, FLOATS, TENSOR).
using AttributeValue =
    std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>, Tensor>;

// A node's attributes by name. The getters with a default return it when the
// attribute is absent; every getter fails with InvalidArgument naming the
// attribute when it is present with another type. Immutable once built;
// safe to read from many threads.
class Attributes {
 public:
  void Set(std::string name, AttributeValue value) { values_[std::move(name)] = std::move(value); }
  bool Has(const std::string& name) const { return values_.count(name) != 0; }
  const std::map<std::string, AttributeValue>& values() const { return values_; }

  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t default_value) const;
  absl::StatusOr<float> GetFloat(const std::string& name, float default_value) const;
  absl::StatusOr<std::string> GetString(const std::string& name,
                                        const std::string& default_value) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(const std::string& name,
                                               std::vector<int64_t> default_value) const;
  absl::StatusOr<std::vector<float>> GetFloats(const std::string& name) const;
  absl::StatusOr<Tensor> GetTensor(const std::string& name) const;

 private:
  template <typename T>
  absl::StatusOr<T> Get(const std::string& name, const char* type_name) const;

  std::map<std::string, AttributeValue> values_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TENSOR_ATTRIBUTES_H_
