#include "core/device/training_step.h"

namespace replicad {
namespace {

thread_local const TrainingStepContext* current = nullptr;

}  // namespace

const TrainingStepContext* CurrentTrainingStep() { return current; }

ScopedTrainingStep::ScopedTrainingStep(const TrainingStepContext* context) : previous_(current) {
  current = context;
}

ScopedTrainingStep::~ScopedTrainingStep() { current = previous_; }

}  // namespace replicad
