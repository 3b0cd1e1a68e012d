#ifndef REPLICAD_CORE_TRAIN_TRAINING_BATCH_H_
#define REPLICAD_CORE_TRAIN_TRAINING_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor/tensor.h"
#include "core/train/training_graph.h"

namespace replicad {

// The checks of a training batch (DataParallelTrainer::Step's contract,
// data_parallel_trainer.h): `inputs` in model input order with the same
// dim 0 > 0, `targets` of the loss's dtype and form with that many rows,
// all values finite (classification probabilities summing to 1).
// InvalidArgument naming the first that fails. `*rows` gets the batch's
// rows even then; `rows_may_be_none`: 0 rows pass (a rank's part of a
// batch, DataParallelTrainer::StepRows).
absl::Status ValidateTrainingBatch(const TrainingGraph& training, const std::vector<Tensor>& inputs,
                                   const Tensor& targets, int64_t* rows,
                                   bool rows_may_be_none = false);

// OK when every int64 label of `targets` is a class in [0, classes);
// otherwise InvalidArgument naming the first that is not by its row in the
// step's whole batch (`first_row` + its index), as the loss kernels do:
// "targets[3] must be a class in [0, 10), received 12".
absl::Status CheckClassLabels(const Tensor& targets, int64_t classes, int64_t first_row);

// CheckClassLabels of a classification step's int64 labels against the
// logits' classes as a plan of `training` knows them (`value_types`,
// ExecutionPlan::value_types), setting *checked when they pass. Float
// targets, another loss, targets outside host memory, or classes the plan
// does not know: OK with *checked false (the loss kernels then check the
// labels).
absl::Status CheckClassLabelsOnHost(const TrainingGraph& training, const ValueTypes& value_types,
                                    const Tensor& targets, int64_t first_row, bool* checked);

// Bytes of a row of a host tensor whose dim 0 is the batch.
size_t RowBytes(const Tensor& t);
// Row `row` of a host tensor whose dim 0 is the batch.
const void* RowPointer(const Tensor& t, int64_t row);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_BATCH_H_
