#ifndef REPLICAD_CORE_DEVICE_RUN_CONTEXT_H_
#define REPLICAD_CORE_DEVICE_RUN_CONTEXT_H_

#include <cstddef>
#include <cstdint>

namespace replicad {

// Sums across the slots that run one training step: how SyncBatchNorm's
// statistics become those of the whole batch.
class StepCollective {
 public:
  virtual ~StepCollective() = default;
  // Replaces data[0..count) with its elementwise sum over every participant
  // of the step, added in participant order (so every slot gets the same
  // bits). Blocks until all have called it; every participant must make the
  // same sequence of calls with the same counts.
  virtual void AllReduceSum(int participant, double* data, size_t count) = 0;
  // A participant failed and will not call again: every waiting and later
  // call returns at once, leaving its data as it was (the step is discarded).
  virtual void Abort() = 0;
};

// What a kernel's Run reads beyond its inputs and outputs: the step it runs
// in. Only training kernels read it (dropout keys its masks by seed, step and
// global row, so a step does not depend on how its batch is split; the
// losses name a bad target by its global row; BatchNormTrain sums over the
// collective; OptimizerStep takes `step` as its update number).
//
// Set by whoever runs the kernels: the trainer makes one per slot and step
// and hands it to ExecutionPlan::RunSplit, the optimizer hands its own
// (step = its update number) to the OptimizerStep kernels, and
// ExecutionPlan::Run, the inference path, hands every kernel a
// default-constructed one. Passed by reference to Kernel::Run and valid for
// the duration of that call only: a kernel copies what it needs (e.g. into a
// launch's arguments) and keeps no pointer to it or its collective.
//
// The defaults describe a single slot outside training: step 0, seed 0, the
// slot's rows are the whole batch starting at row 0, no collective. The
// training kernels then act as one slot at step 0 would (OptimizerStep
// refuses to run: it has no update number).
struct RunContext {
  int64_t step = 0;         // 1-based training step (the optimizer's update number); 0: none.
  uint64_t seed = 0;        // The training run's seed.
  int64_t first_row = 0;    // Global index, in the step's batch, of this slot's first row.
  int64_t global_rows = 0;  // Rows of the step's whole batch; 0 outside training.
  int participant = 0;      // This slot's index among the step's participants.
  StepCollective* collective = nullptr;  // Null: this slot's statistics are the batch's.
  // The step's class labels were checked on the host (CheckClassLabels), so
  // a loss kernel need not check them itself: on a GPU that check reads a
  // flag back and waits for the stream in the middle of the step.
  bool targets_checked = false;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_RUN_CONTEXT_H_
