#ifndef REPLICAD_CORE_SERVE_SERVING_OBSERVER_H_
#define REPLICAD_CORE_SERVE_SERVING_OBSERVER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/serve/loaded_model.h"
#include "core/serve/model_statistics.h"
#include "core/train/data_parallel_trainer.h"

namespace replicad {

// Told about every finished request (for metrics). Called on core threads.
class ServingObserver {
 public:
  virtual ~ServingObserver() = default;
  virtual void OnInferred(const LoadedModel& model, int64_t rows, const RequestTimes& times) = 0;
  // A step that ran, applied or skipped (step.skipped). `queued`: its time
  // in the model's queue, before it ran.
  virtual void OnTrainStep(const LoadedModel& model, const DataParallelTrainer::StepResult& step,
                           absl::Duration queued) = 0;
  // A TrainStep for a model that exists, answered with `status` (not OK):
  // refused before it ran, or failed without being applied.
  virtual void OnTrainStepRefused(const LoadedModel& model, const absl::Status& status) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SERVING_OBSERVER_H_
