#include "core/serve/train_step_stream.h"

#include <utility>

namespace replicad {

TrainStepStream::TrainStepStream(ServingCore& core, RequestContext context, Answer answer)
    : core_(core), context_(std::move(context)), answer_(std::move(answer)) {}

bool TrainStepStream::Add(absl::StatusOr<TrainRequest> request,
                          std::shared_ptr<const void> keep_alive) {
  if (failed()) return false;
  std::shared_ptr<LoadedModel> model;
  absl::StatusOr<BoundTrainStep> step =
      request.ok() ? core_.BindTrainStep(*request, std::move(keep_alive), &model)
                   : absl::StatusOr<BoundTrainStep>(request.status());
  Entry entry{std::move(step), std::move(model)};
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return false;
    if (running_) {
      // Its turn comes once the running step is answered; meanwhile its
      // trainer may upload it.
      if (entry.step.ok()) core_.ExpectTrainStep(*entry.step);
      waiting_ = std::move(entry);
      return false;
    }
    running_ = true;
  }
  Run(std::move(entry));
  return HasRoom();
}

bool TrainStepStream::HasRoom() const {
  absl::MutexLock lock(&mu_);
  return !failed_ && !waiting_.has_value();
}

int TrainStepStream::pending() const {
  absl::MutexLock lock(&mu_);
  return (running_ ? 1 : 0) + (waiting_.has_value() ? 1 : 0);
}

bool TrainStepStream::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void TrainStepStream::Run(Entry entry) {
  if (!entry.step.ok()) return Finished(entry.step.status(), std::move(entry.model));
  core_.TrainBound(*std::move(entry.step), context_,
                   [self = shared_from_this()](absl::StatusOr<Result> result,
                                               std::shared_ptr<LoadedModel> model) {
                     self->Finished(std::move(result), std::move(model));
                   });
}

void TrainStepStream::Finished(absl::StatusOr<Result> result, std::shared_ptr<LoadedModel> model) {
  std::optional<Entry> next;
  {
    absl::MutexLock lock(&mu_);
    if (!result.ok()) {
      failed_ = true;
      waiting_.reset();  // Never runs.
      running_ = false;
    } else if (waiting_.has_value()) {
      next = std::move(waiting_);
      waiting_.reset();  // running_ stays: the next one runs now.
    } else {
      running_ = false;
    }
  }
  // This answer first, so that the answers keep the steps' order even when
  // the next one fails at once.
  answer_(std::move(result), std::move(model));
  if (next.has_value()) Run(std::move(*next));
}

}  // namespace replicad
