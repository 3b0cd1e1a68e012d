#include "core/train/training_batch.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/train/finite_values.h"

namespace replicad {

absl::Status ValidateTrainingBatch(const TrainingGraph& training, const std::vector<Tensor>& inputs,
                                   const Tensor& targets, int64_t* batch_rows,
                                   bool rows_may_be_none) {
  if (inputs.size() != static_cast<size_t>(training.num_model_inputs) || inputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", training.num_model_inputs, " inputs, received ", inputs.size()));
  }
  const int64_t batch = inputs[0].shape().empty() ? 0 : inputs[0].shape()[0];
  *batch_rows = batch;
  if (batch < 0 || (batch == 0 && !rows_may_be_none)) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: the batch must have at least one row, received ",
                     ShapeToString(inputs[0].shape())));
  }
  if (training.classification &&
      !(targets.dtype() == DType::kInt64 ? targets.shape().size() == 1
                                         : targets.shape().size() == 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "targets: softmax cross-entropy takes int64 [N] class labels or float32 [N, C] "
        "probabilities, received ",
        TensorTypeToString(targets.type())));
  }
  const DType target_dtype = training.graph.values[training.graph.inputs[inputs.size()]].type.dtype;
  if (targets.dtype() != target_dtype) {
    return absl::InvalidArgumentError(absl::StrCat("targets: dtype must be ",
                                                   DTypeName(target_dtype), ", received ",
                                                   DTypeName(targets.dtype())));
  }
  if (targets.shape().empty() || targets.shape()[0] != batch) {
    return absl::InvalidArgumentError(absl::StrCat("targets: dim 0 must be the batch size ", batch,
                                                   " of the inputs, received ",
                                                   ShapeToString(targets.shape())));
  }
  // Values that would turn the weights to NaN are refused before anything runs.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& name = training.graph.values[training.graph.inputs[i]].name;
    REPLICAD_RETURN_IF_ERROR(CheckFiniteValues(inputs[i], absl::StrCat("input '", name, "'")));
  }
  REPLICAD_RETURN_IF_ERROR(CheckFiniteValues(targets, "targets"));
  if (training.classification) REPLICAD_RETURN_IF_ERROR(CheckProbabilityRows(targets, "targets"));
  return absl::OkStatus();
}

absl::Status CheckClassLabels(const Tensor& targets, int64_t classes, int64_t first_row) {
  const int64_t* labels = targets.data<int64_t>();
  for (int64_t row = 0; row < targets.num_elements(); ++row) {
    if (labels[row] < 0 || labels[row] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat("targets[", first_row + row,
                                                     "] must be a class in [0, ", classes,
                                                     "), received ", labels[row]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckClassLabelsOnHost(const TrainingGraph& training, const ValueTypes& value_types,
                                    const Tensor& targets, int64_t first_row, bool* checked) {
  *checked = false;
  if (!training.classification || targets.dtype() != DType::kInt64 || training.loss_input < 0 ||
      targets.location().kind != MemoryKind::kHost) {
    return absl::OkStatus();
  }
  const std::optional<TensorType>& logits = value_types[training.loss_input];
  if (!logits.has_value() || logits->shape.empty()) return absl::OkStatus();
  REPLICAD_RETURN_IF_ERROR(CheckClassLabels(targets, logits->shape.back(), first_row));
  *checked = true;
  return absl::OkStatus();
}

size_t RowBytes(const Tensor& t) {
  const int64_t rows = t.shape().empty() ? 1 : t.shape()[0];
  return rows == 0 ? 0 : t.byte_size() / static_cast<size_t>(rows);
}

const void* RowPointer(const Tensor& t, int64_t row) {
  return static_cast<const char*>(t.raw_data()) + row * RowBytes(t);
}

}  // namespace replicad
