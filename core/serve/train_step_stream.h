#ifndef REPLICAD_CORE_SERVE_TRAIN_STEP_STREAM_H_
#define REPLICAD_CORE_SERVE_TRAIN_STEP_STREAM_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/serve/request_context.h"
#include "core/serve/train_step_queue.h"

namespace replicad {

// The training steps one client streams (replicad.v1 TrainSteps), in the
// order it sends them. Each is bound as it arrives and queued as a
// TrainStep once the one before it was applied and answered; the one
// received meanwhile waits, bound, and its model's trainer uploads it while
// the step before computes (TrainStepQueue::ExpectTrainStep). The first step
// that fails (its request, its binding or its run) ends the stream: those
// waiting then are answered Aborted without running (and the upload hint
// withdrawn), and no step is taken after. Every step taken gets exactly one
// answer, in the order taken. At most one step runs and one waits, so a
// protocol reads the next message only while HasRoom().
// Thread-safe; make it with std::make_shared (its steps' completions hold it).
class TrainStepStream : public std::enable_shared_from_this<TrainStepStream> {
 public:
  using Result = DataParallelTrainer::StepResult;
  // A step's answer: its result, or its error (the first error ends the
  // stream), with its model when one was found (for the metrics). Runs on
  // the training side's thread, or on Add's when the step fails at once;
  // never two at a time.
  using Answer =
      std::function<void(absl::StatusOr<Result> result, std::shared_ptr<LoadedModel> model)>;

  // `queue` (the ServingCore) must outlive the stream; `context` applies to
  // every step.
  TrainStepStream(TrainStepQueue& queue, RequestContext context, Answer answer);

  // The client's next step (`request`: its decoding's error, if that
  // failed), its bytes kept valid by `keep_alive`. Whether the stream took
  // it (and will answer it): false once a step has failed.
  bool Add(absl::StatusOr<TrainRequest> request, std::shared_ptr<const void> keep_alive);
  // No step waits and none has failed: a protocol may read the next one.
  bool HasRoom() const;

 private:
  // A step as received: bound, or why it could not be.
  struct Entry {
    absl::StatusOr<BoundTrainStep> step;
    std::shared_ptr<LoadedModel> model;
  };
  void Run(Entry entry);
  void Finished(absl::StatusOr<Result> result, std::shared_ptr<LoadedModel> model);

  TrainStepQueue& queue_;
  const RequestContext context_;
  const Answer answer_;
  mutable absl::Mutex mu_;
  // A step is running, or its answer is on its way (so a step added
  // meanwhile waits its turn).
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  // Received, to run in order once the running one is answered: one, when
  // the protocol reads only while HasRoom(); more are kept, never dropped.
  std::deque<Entry> waiting_ ABSL_GUARDED_BY(mu_);
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  // The step last posted to its model as upcoming, withdrawn if the stream
  // fails before it runs.
  std::optional<BoundTrainStep> expected_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_TRAIN_STEP_STREAM_H_
