#ifndef REPLICAD_CORE_SERVE_TRAIN_STEP_STREAM_H_
#define REPLICAD_CORE_SERVE_TRAIN_STEP_STREAM_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/serve/request_context.h"
#include "core/serve/serving_core.h"

namespace replicad {

// The training steps one client streams (replicad.v1 TrainSteps), in the
// order it sends them. Each is bound as it arrives and queued as a
// TrainStep once the one before it was applied; the one received meanwhile
// waits, bound, and its model's trainer uploads it while the step before
// computes (ServingCore::ExpectTrainStep). The first step that fails (its
// request, its binding or its run) ends the stream: nothing received after
// it runs. At most one step runs and one waits, so a protocol reads the
// next message only while there is room (Add's answer, HasRoom).
// Thread-safe; make it with std::make_shared (its steps' completions hold it).
class TrainStepStream : public std::enable_shared_from_this<TrainStepStream> {
 public:
  using Result = DataParallelTrainer::StepResult;
  // A step's answer, in order: its result, or the error that ends the
  // stream, with its model when one was found (for the metrics). Runs on
  // the training side's thread, or on Add's when the step fails at once.
  using Answer =
      std::function<void(absl::StatusOr<Result> result, std::shared_ptr<LoadedModel> model)>;

  // `core` must outlive the stream; `context` applies to every step.
  TrainStepStream(ServingCore& core, RequestContext context, Answer answer);

  // The client's next step (`request`: its decoding's error, if that
  // failed), its bytes kept valid by `keep_alive`. Whether another may be
  // added now; false: wait for an answer (then HasRoom), or the stream has
  // ended.
  bool Add(absl::StatusOr<TrainRequest> request, std::shared_ptr<const void> keep_alive);
  // No step waits and none has failed.
  bool HasRoom() const;
  // Steps added and not yet answered (the waiting one included); 0 once a
  // step failed and was answered.
  int pending() const;
  bool failed() const;

 private:
  // A step as received: bound, or why it could not be.
  struct Entry {
    absl::StatusOr<BoundTrainStep> step;
    std::shared_ptr<LoadedModel> model;
  };
  void Run(Entry entry);
  void Finished(absl::StatusOr<Result> result, std::shared_ptr<LoadedModel> model);

  ServingCore& core_;
  const RequestContext context_;
  const Answer answer_;
  mutable absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Entry> waiting_ ABSL_GUARDED_BY(mu_);
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_TRAIN_STEP_STREAM_H_
