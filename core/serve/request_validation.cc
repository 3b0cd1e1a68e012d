#include "core/serve/request_validation.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/client_text.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

std::string InputNames(const Model& model) {
  return absl::StrJoin(model.inputs(), ", ", [](std::string* out, const TensorSpec& s) {
    absl::StrAppend(out, s.name, " ", TensorTypeToString(s.type));
  });
}

absl::Status CheckShape(const std::string& field, const TensorSpec& spec, const Shape& shape) {
  const Shape& expected = spec.type.shape;
  if (expected.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the model declares this input as rank 0, which has no batch dimension to split"));
  }
  if (shape.size() != expected.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected rank ", expected.size(), " (shape ", ShapeToString(expected),
        "), received rank ", shape.size(), " (shape ", ShapeToString(shape), ")"));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": dim ", d, " is negative (shape ", ShapeToString(shape), ")"));
    }
    if (d > 0 && expected[d] != kAnyDim && expected[d] != shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": dim ", d, " expected ", expected[d], ", received ", shape[d],
          " (expected shape ", ShapeToString(expected), ", received ", ShapeToString(shape), ")"));
    }
  }
  return absl::OkStatus();
}

// A tensor viewing `data` (kept alive by `keep_alive`) when it is aligned
// for its element type, else a copy in aligned memory: kernels read elements
// through typed pointers, and a protocol may put a tensor at any byte (a
// binary HTTP body puts it wherever the JSON header before it ends).
absl::StatusOr<Tensor> ViewOrAlignedCopy(DType dtype, const Shape& shape, const void* data,
                                         size_t bytes, std::shared_ptr<const void> keep_alive) {
  const size_t alignment = DTypeSize(dtype);
  if (alignment > 1 && reinterpret_cast<uintptr_t>(data) % alignment != 0) {
    std::shared_ptr<Buffer> copy = Buffer::AllocateHost(bytes);
    std::memcpy(copy->data(), data, bytes);
    return Tensor::Create(dtype, shape, std::move(copy));
  }
  auto view = std::make_shared<Buffer>(const_cast<void*>(data), bytes, MemoryLocation{},
                                       std::move(keep_alive));
  return Tensor::Create(dtype, shape, std::move(view));
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> BindInputs(const Model& model,
                                               const std::vector<RequestInput>& inputs,
                                               int64_t max_batch_size,
                                               std::shared_ptr<const void> keep_alive) {
  std::vector<Tensor> bound(model.inputs().size());
  std::vector<int> given_at(model.inputs().size(), -1);
  int64_t batch = -1;
  int batch_from = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const RequestInput& in = inputs[i];
    const std::string field = absl::StrCat("inputs[", i, "] '", ClientText(in.name), "'");
    const int index = model.InputIndex(in.name);
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "].name: model '", model.name(),
                                                     "' has no input '", ClientText(in.name),
                                                     "'; expected one of: ", InputNames(model)));
    }
    if (given_at[index] >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[", i, "].name: input '", ClientText(in.name),
                       "' is already given as inputs[", given_at[index], "]"));
    }
    given_at[index] = static_cast<int>(i);
    const TensorSpec& spec = model.inputs()[index];
    if (in.dtype != spec.type.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": dtype expected ",
                                                     DTypeName(spec.type.dtype), ", received ",
                                                     DTypeName(in.dtype)));
    }
    REPLICAD_RETURN_IF_ERROR(CheckShape(field, spec, in.shape));
    const std::optional<size_t> size = CheckedByteSize(in.dtype, in.shape);
    if (!size) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": shape ", ShapeToString(in.shape),
                                                     " has more elements than can be addressed"));
    }
    const size_t needed = *size;
    if (in.bytes != needed) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": raw holds ", in.bytes, " bytes; ",
                                                     DTypeName(in.dtype), ShapeToString(in.shape),
                                                     " needs ", needed));
    }
    if (batch_from < 0) {
      batch = in.shape[0];
      batch_from = static_cast<int>(i);
    } else if (in.shape[0] != batch) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": batch size (dim 0) expected ", batch,
                                                     " like inputs[", batch_from, "], received ",
                                                     in.shape[0]));
    }
    REPLICAD_ASSIGN_OR_RETURN(Tensor tensor,
                              ViewOrAlignedCopy(in.dtype, in.shape, in.data, in.bytes, keep_alive));
    bound[index] = std::move(tensor);
  }
  for (size_t m = 0; m < given_at.size(); ++m) {
    if (given_at[m] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("inputs: input '", model.inputs()[m].name,
                                                     "' is missing; model '", model.name(),
                                                     "' expects: ", InputNames(model)));
    }
  }
  if (batch == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs[", batch_from, "]: the batch is empty (dim 0 is 0); send at least 1 row"));
  }
  if (max_batch_size > 0 && batch > max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[", batch_from, "]: batch size ", batch,
                                                   " exceeds the maximum of ", max_batch_size,
                                                   " (--max-batch-size)"));
  }
  return bound;
}

absl::StatusOr<Tensor> BindTargets(const RequestInput& targets, int64_t batch,
                                   std::shared_ptr<const void> keep_alive) {
  if (targets.dtype != DType::kFloat32 && targets.dtype != DType::kInt64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "targets: dtype expected float32 or int64, received ", DTypeName(targets.dtype)));
  }
  if (targets.shape.empty() || targets.shape[0] != batch) {
    return absl::InvalidArgumentError(absl::StrCat("targets: shape expected [", batch,
                                                   ", ...] (the inputs' batch), received ",
                                                   ShapeToString(targets.shape)));
  }
  for (int64_t d : targets.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("targets: dimensions must be >= 0, received ",
                                                     ShapeToString(targets.shape)));
    }
  }
  const std::optional<size_t> size = CheckedByteSize(targets.dtype, targets.shape);
  if (!size) {
    return absl::InvalidArgumentError(absl::StrCat("targets: shape ", ShapeToString(targets.shape),
                                                   " has more elements than can be addressed"));
  }
  const size_t needed = *size;
  if (targets.bytes != needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("targets: raw holds ", targets.bytes, " bytes; ", DTypeName(targets.dtype),
                     ShapeToString(targets.shape), " needs ", needed));
  }
  return ViewOrAlignedCopy(targets.dtype, targets.shape, targets.data, targets.bytes,
                           std::move(keep_alive));
}

}  // namespace replicad
