#ifndef REPLICAD_CORE_DEVICE_TRAINING_STEP_H_
#define REPLICAD_CORE_DEVICE_TRAINING_STEP_H_

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

// What a training plan's kernels read beyond their inputs: which rows of the
// global batch their slot runs (dropout masks are keyed by global row, so a
// step does not depend on the split), the step, the seed, and the
// collective. The trainer sets it on a slot's stream thread for the length
// of one plan run.
struct TrainingStepContext {
  int64_t step = 0;
  uint64_t seed = 0;
  int64_t first_row = 0;                 // Global index of the slot's first row.
  int64_t global_rows = 0;               // Rows of the whole batch.
  int participant = 0;                   // This slot's index among the step's participants.
  StepCollective* collective = nullptr;  // Null: this slot's statistics are the batch's.
};

// The context of the training step running on this thread, or nullptr
// outside one (then training kernels act as on a single slot at step 0).
const TrainingStepContext* CurrentTrainingStep();

// Makes `context` current on this thread until destroyed.
class ScopedTrainingStep {
 public:
  explicit ScopedTrainingStep(const TrainingStepContext* context);
  ~ScopedTrainingStep();
  ScopedTrainingStep(const ScopedTrainingStep&) = delete;
  ScopedTrainingStep& operator=(const ScopedTrainingStep&) = delete;

 private:
  const TrainingStepContext* previous_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_TRAINING_STEP_H_
