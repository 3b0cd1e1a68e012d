#ifndef REPLICAD_CORE_TRAIN_STEP_STATE_H_
#define REPLICAD_CORE_TRAIN_STEP_STATE_H_

#include <cstdint>
#include <vector>

#include "core/device/batch_split.h"
#include "core/tensor/tensor.h"
#include "core/train/rank_coordinator.h"
#include "core/train/training_slot.h"
#include "core/train/upcoming_batch.h"

namespace replicad {

// Internal to DataParallelTrainer: the state of one step as it goes from
// stage to stage (data_parallel_trainer.cc).

// How far a step went across ranks.
struct StepProgress {
  bool ready = false;   // Every rank was ready (GatherReadiness): every rank goes on to sum.
  bool summed = false;  // It summed across ranks (SumStep).
};

// Everything one step works on, handed from stage to stage.
struct StepState {
  StepState(const std::vector<Tensor>& step_inputs, const Tensor& step_targets,
            const StepMode& step_mode)
      : inputs(step_inputs), targets(step_targets), mode(step_mode) {}
  const std::vector<Tensor>& inputs;
  const Tensor& targets;
  const StepMode mode;
  int64_t rows = 0;                  // Of `inputs`.
  int64_t batch = 0;                 // The job's: `rows`, rank 0's, or every rank's shard.
  int64_t first_row = 0;             // The job's index of inputs' row 0.
  float scale = 0;                   // 1 / (batch x loss_scale).
  float loss_scale = 1;              // fp16: what the loss's gradient is multiplied by.
  std::vector<BatchSlice> slices;    // This rank's, on its own slot indices.
  std::vector<int> ranks_with_rows;  // Ascending.
  bool runs_first_row = false;
  bool targets_checked = false;  // The class labels, on the host (RunContext::targets_checked).
  std::vector<SlotPlan*> plans;  // Per slice.
  std::vector<double> seconds, forward_seconds;
  std::vector<char> prefetched;  // Per slice: its inputs were uploaded ahead.
  // Where the caller posts its next batch, for the slots to upload it while
  // this step computes; null: nothing is uploaded ahead (ranks, shards).
  std::shared_ptr<const UpcomingBatches> upcoming;
  double loss = 0, correct = 0;  // Sums: this rank's, then the job's.
  int64_t reduced_bytes = 0;
  std::vector<Tensor> running;  // The running statistics every slot takes.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_STEP_STATE_H_
