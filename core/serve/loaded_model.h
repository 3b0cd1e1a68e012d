#ifndef REPLICAD_CORE_SERVE_LOADED_MODEL_H_
#define REPLICAD_CORE_SERVE_LOADED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "core/base/clock.h"
#include "core/serve/model_statistics.h"
#include "core/serve/published_servable.h"
#include "core/serve/scheduler.h"
#include "core/serve/scheduler_options.h"
#include "core/serve/servable.h"
#include "core/train/training_session.h"

namespace replicad {

// One version of one model, ready to serve: what the model manager hands out
// and what a request holds while it runs, so requests in flight finish on
// the version they started on whatever is loaded meanwhile. Immutable but
// for its statistics (thread-safe); training publishes new weights through
// `published`, not by changing this.
struct LoadedModel {
  std::string name;
  int64_t version = 1;
  std::string source;          // Where it was loaded from, e.g. "/models/mnist/1/model.onnx".
  int64_t max_batch_size = 0;  // 0: no limit.
  // The model's configuration file as its repository checked it (the
  // daemon's: Triton's config.pbtxt in protobuf text format); empty when it
  // has none. The serving core never reads it: the front doors report it.
  std::string config_text;
  // How its requests are queued, batched and routed (validated).
  SchedulerOptions scheduling;
  std::shared_ptr<Servable> servable;  // The loaded weights.
  // Its training (null when it cannot be trained here), and what Predict
  // runs on once training has changed the weights (null: `servable`).
  std::shared_ptr<TrainingSession> training;
  std::shared_ptr<PublishedServable> published;
  // Queues, batches and routes its requests onto `servable`'s slots; made
  // by StartScheduling once the rest is filled in.
  std::shared_ptr<Scheduler> scheduler;
  std::shared_ptr<ModelStatistics> statistics = std::make_shared<ModelStatistics>();

  const Model& model() const { return servable->model(); }
  // True while at least one slot can run it.
  bool HasHealthySlot() const;
};

// Makes `model`'s scheduler from its servable, training, published servable
// and `scheduling`
// (InvalidArgument naming the field when that is invalid) and, with `warm`,
// builds and measures its first plans (Scheduler::Warm). Call while loading,
// before the model is served.
absl::Status StartScheduling(LoadedModel& model, SchedulerObserver* observer, bool warm,
                             const Clock* clock = RealClock());

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_LOADED_MODEL_H_
