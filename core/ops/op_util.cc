#include "core/ops/op_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"

namespace replicad {
namespace {

std::string DTypeList(std::initializer_list<DType> dtypes) {
  return absl::StrJoin(dtypes, " or ",
                       [](std::string* out, DType d) { absl::StrAppend(out, DTypeName(d)); });
}

// The Attributes getters name the attribute but not the node; messages from
// a model with hundreds of nodes need both.
template <typename T>
absl::StatusOr<T> WithNode(const KernelSpec& spec, absl::StatusOr<T> value) {
  if (value.ok()) return value;
  return absl::Status(value.status().code(),
                      absl::StrCat(NodeLabel(spec), ": ", value.status().message()));
}

}  // namespace

std::string NodeLabel(const KernelSpec& spec) {
  if (spec.node_name.empty()) return absl::StrCat(spec.op_type, " node (unnamed)");
  return absl::StrCat(spec.op_type, " node '", spec.node_name, "'");
}

std::string FormatInts(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

absl::Status NodeError(const KernelSpec& spec, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(NodeLabel(spec), ": ", message));
}

absl::Status NodeUnimplemented(const KernelSpec& spec, absl::string_view message) {
  return absl::UnimplementedError(absl::StrCat(NodeLabel(spec), ": ", message));
}

absl::Status CheckInputCount(const KernelSpec& spec, int min_inputs, int max_inputs) {
  const int count = static_cast<int>(spec.inputs.size());
  if (count < min_inputs || count > max_inputs) {
    const std::string expected = min_inputs == max_inputs
                                     ? absl::StrCat(min_inputs)
                                     : absl::StrCat(min_inputs, " to ", max_inputs);
    return NodeError(spec, absl::StrCat("expected ", expected, " inputs, received ", count));
  }
  if (!spec.constant_inputs.empty() && spec.constant_inputs.size() != spec.inputs.size()) {
    return NodeError(spec, absl::StrCat("constant_inputs has ", spec.constant_inputs.size(),
                                        " entries for ", count, " inputs"));
  }
  return absl::OkStatus();
}

bool HasInput(const KernelSpec& spec, int index) {
  return index >= 0 && index < static_cast<int>(spec.inputs.size()) &&
         spec.inputs[index].has_value();
}

absl::StatusOr<TensorType> RequiredInput(const KernelSpec& spec, int index,
                                         absl::string_view name) {
  if (!HasInput(spec, index)) {
    return NodeError(spec, absl::StrCat("input ", index, " '", name, "' is required"));
  }
  return *spec.inputs[index];
}

const Tensor* ConstantInput(const KernelSpec& spec, int index) {
  if (index < 0 || index >= static_cast<int>(spec.constant_inputs.size())) return nullptr;
  return spec.constant_inputs[index];
}

absl::Status CheckInputDType(const KernelSpec& spec, int index, absl::string_view name,
                             const TensorType& type, std::initializer_list<DType> allowed,
                             std::initializer_list<DType> onnx_allows) {
  if (std::find(allowed.begin(), allowed.end(), type.dtype) != allowed.end()) {
    return absl::OkStatus();
  }
  const std::string message =
      absl::StrCat("input ", index, " '", name, "' must be ", DTypeList(allowed), ", received ",
                   TensorTypeToString(type));
  if (std::find(onnx_allows.begin(), onnx_allows.end(), type.dtype) != onnx_allows.end()) {
    return NodeUnimplemented(spec, message);
  }
  return NodeError(spec, message);
}

absl::Status InferBroadcastPair(KernelSpec* spec, std::initializer_list<DType> allowed,
                                std::optional<DType> out) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(*spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType a, RequiredInput(*spec, 0, "A"));
  REPLICAD_ASSIGN_OR_RETURN(TensorType b, RequiredInput(*spec, 1, "B"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(*spec, 0, "A", a, allowed));
  if (b.dtype != a.dtype) {
    return NodeError(*spec, absl::StrCat("input 1 'B' must have A's dtype ", DTypeName(a.dtype),
                                         ", received ", TensorTypeToString(b)));
  }
  const std::optional<Shape> shape = BroadcastShapes(a.shape, b.shape);
  if (!shape.has_value()) {
    return NodeError(*spec, absl::StrCat("inputs A ", TensorTypeToString(a), " and B ",
                                         TensorTypeToString(b), " do not broadcast"));
  }
  spec->outputs = {TensorType{out.value_or(a.dtype), *shape}};
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NormalizeAxis(const KernelSpec& spec, absl::string_view attribute,
                                      int64_t axis, int64_t rank, bool inclusive_end) {
  const int64_t upper = inclusive_end ? rank : rank - 1;
  if (axis < -rank || axis > upper) {
    return NodeError(spec, absl::StrCat("attribute '", attribute, "' must be in [", -rank, ", ",
                                        upper, "] for rank ", rank, ", received ", axis));
  }
  return axis < 0 ? axis + rank : axis;
}

absl::StatusOr<int64_t> IntAttribute(const KernelSpec& spec, const std::string& name,
                                     int64_t default_value) {
  return WithNode(spec, spec.attributes->GetInt(name, default_value));
}

absl::StatusOr<float> FloatAttribute(const KernelSpec& spec, const std::string& name,
                                     float default_value) {
  return WithNode(spec, spec.attributes->GetFloat(name, default_value));
}

absl::StatusOr<std::string> StringAttribute(const KernelSpec& spec, const std::string& name,
                                            const std::string& default_value) {
  return WithNode(spec, spec.attributes->GetString(name, default_value));
}

absl::StatusOr<std::vector<int64_t>> IntsAttribute(const KernelSpec& spec, const std::string& name,
                                                   std::vector<int64_t> default_value) {
  return WithNode(spec, spec.attributes->GetInts(name, std::move(default_value)));
}

KernelSpec ForwardInputs(const KernelSpec& spec, size_t count) {
  KernelSpec forward = spec;
  forward.inputs.resize(count);
  forward.constant_inputs.resize(spec.constant_inputs.empty() ? 0 : count);
  return forward;
}

KernelSpec WithoutFirstInput(const KernelSpec& spec) {
  KernelSpec forward = spec;
  forward.inputs.erase(forward.inputs.begin());
  if (!forward.constant_inputs.empty())
    forward.constant_inputs.erase(forward.constant_inputs.begin());
  return forward;
}

absl::Status CheckOutputBytes(const KernelSpec& spec, int64_t max_bytes) {
  for (const TensorType& out : spec.outputs) {
    int64_t bytes = static_cast<int64_t>(DTypeSize(out.dtype));
    for (int64_t d : out.shape) {
      if (d == 0) {
        bytes = 0;
        break;
      }
      if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes) || bytes > max_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(NodeLabel(spec), " would make an output ",
                                                         TensorTypeToString(out), " of more than ",
                                                         max_bytes, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

bool IsPermutation(const std::vector<int64_t>& perm, int64_t rank) {
  if (static_cast<int64_t>(perm.size()) != rank) return false;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}

}  // namespace replicad
