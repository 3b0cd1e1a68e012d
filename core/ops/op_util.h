#ifndef REPLICAD_CORE_OPS_OP_UTIL_H_
#define REPLICAD_CORE_OPS_OP_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// Helpers shared by the shape rules in core/ops and the backends' kernels, so
// that every message names a node the same way. Pure functions; thread-safe.

// "Conv node 'conv1'", or "Conv node (unnamed)" when the node has no name.
std::string NodeLabel(const KernelSpec& spec);

// "[1,2,3]": a list of integers as the messages quote attributes and axes.
std::string FormatInts(const std::vector<int64_t>& values);

// InvalidArgument "<node>: <message>".
absl::Status NodeError(const KernelSpec& spec, absl::string_view message);
// Unimplemented "<node>: <message>".
absl::Status NodeUnimplemented(const KernelSpec& spec, absl::string_view message);

// InvalidArgument unless min_inputs <= spec.inputs.size() <= max_inputs and
// spec.constant_inputs is empty or as long as spec.inputs.
absl::Status CheckInputCount(const KernelSpec& spec, int min_inputs, int max_inputs);

// The type of input `index` (called `name` in the ONNX spec); InvalidArgument
// when it is absent.
absl::StatusOr<TensorType> RequiredInput(const KernelSpec& spec, int index, absl::string_view name);

// True when input `index` is declared and present.
bool HasInput(const KernelSpec& spec, int index);

// The host value of input `index` when the plan knows it, else nullptr.
const Tensor* ConstantInput(const KernelSpec& spec, int index);

// For CheckInputDType: every number type, and those with bool.
inline constexpr std::initializer_list<DType> kNumericDTypes = {
    DType::kFloat32, DType::kUint8, DType::kInt8, DType::kInt32, DType::kInt64};
inline constexpr std::initializer_list<DType> kNumericOrBoolDTypes = {
    DType::kFloat32, DType::kUint8, DType::kInt8, DType::kInt32, DType::kInt64, DType::kBool};

// Checks that input `index` has one of `allowed`. A dtype outside `allowed`
// is InvalidArgument when ONNX forbids it for the op and Unimplemented when
// ONNX allows it (onnx_allows) but replicad does not compute it.
absl::Status CheckInputDType(const KernelSpec& spec, int index, absl::string_view name,
                             const TensorType& type, std::initializer_list<DType> allowed,
                             std::initializer_list<DType> onnx_allows = {});

// The shape rule of an element-wise op of two inputs A and B of one dtype
// from `allowed`, broadcast together (ONNX's multidirectional broadcasting):
// sets spec->outputs to `out` (A's dtype when nullopt) at the broadcast shape.
absl::Status InferBroadcastPair(KernelSpec* spec, std::initializer_list<DType> allowed,
                                std::optional<DType> out);

// ResourceExhausted naming the node when an output of spec would take more
// than `max_bytes` (or its size overflows int64).
absl::Status CheckOutputBytes(const KernelSpec& spec, int64_t max_bytes);

// Maps axis in [-rank, rank) (or [-rank, rank] when `inclusive_end`, as
// Flatten allows) to a non-negative axis; InvalidArgument naming the
// attribute otherwise.
absl::StatusOr<int64_t> NormalizeAxis(const KernelSpec& spec, absl::string_view attribute,
                                      int64_t axis, int64_t rank, bool inclusive_end = false);

// A backward node's view of its forward node (core/ops/training_ops.h):
// spec with only its first `count` inputs, or with its first input (dY)
// dropped, so the forward node's shape rule and attribute parsers apply.
KernelSpec ForwardInputs(const KernelSpec& spec, size_t count);
KernelSpec WithoutFirstInput(const KernelSpec& spec);

// Attribute getters: the default when absent; InvalidArgument naming the
// node and the attribute when present with another type.
absl::StatusOr<int64_t> IntAttribute(const KernelSpec& spec, const std::string& name,
                                     int64_t default_value);
absl::StatusOr<float> FloatAttribute(const KernelSpec& spec, const std::string& name,
                                     float default_value);
absl::StatusOr<std::string> StringAttribute(const KernelSpec& spec, const std::string& name,
                                            const std::string& default_value);
absl::StatusOr<std::vector<int64_t>> IntsAttribute(const KernelSpec& spec, const std::string& name,
                                                   std::vector<int64_t> default_value);

// Whether `perm` holds each of 0 .. rank-1 once (Transpose's perm).
bool IsPermutation(const std::vector<int64_t>& perm, int64_t rank);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_OP_UTIL_H_
