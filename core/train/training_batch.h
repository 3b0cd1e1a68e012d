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

// Bytes of a row of a host tensor whose dim 0 is the batch.
size_t RowBytes(const Tensor& t);
// Row `row` of a host tensor whose dim 0 is the batch.
const void* RowPointer(const Tensor& t, int64_t row);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_BATCH_H_
