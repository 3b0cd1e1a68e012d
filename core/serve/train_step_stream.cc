#include "core/serve/train_step_stream.h"

#include <utility>

namespace replicad {

TrainStepStream::TrainStepStream(TrainStepQueue& queue, RequestContext context, Answer answer)
    : queue_(queue), context_(std::move(context)), answer_(std::move(answer)) {}

bool TrainStepStream::Add(absl::StatusOr<TrainRequest> request,
                          std::shared_ptr<const void> keep_alive) {
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return false;  // Ended: nothing to bind for.
  }
  std::shared_ptr<LoadedModel> model;
  absl::StatusOr<BoundTrainStep> step =
      request.ok() ? queue_.BindTrainStep(*request, std::move(keep_alive), &model)
                   : absl::StatusOr<BoundTrainStep>(request.status());
  Entry entry{std::move(step), std::move(model)};
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return false;
    if (running_) {
      // Its turn comes once the running step is answered; meanwhile its
      // trainer may upload it.
      if (entry.step.ok()) {
        queue_.ExpectTrainStep(*entry.step);
        expected_ = *entry.step;
      }
      waiting_.push_back(std::move(entry));
      return true;
    }
    running_ = true;
  }
  Run(std::move(entry));
  return true;
}

bool TrainStepStream::HasRoom() const {
  absl::MutexLock lock(&mu_);
  return !failed_ && waiting_.empty();
}

void TrainStepStream::Run(Entry entry) {
  if (!entry.step.ok()) return Finished(entry.step.status(), std::move(entry.model));
  queue_.TrainBound(*std::move(entry.step), context_,
                    [self = shared_from_this()](absl::StatusOr<Result> result,
                                                std::shared_ptr<LoadedModel> model) {
                      self->Finished(std::move(result), std::move(model));
                    });
}

void TrainStepStream::Finished(absl::StatusOr<Result> result, std::shared_ptr<LoadedModel> model) {
  std::optional<Entry> next;
  std::deque<Entry> dropped;
  std::optional<BoundTrainStep> withdrawn;
  {
    absl::MutexLock lock(&mu_);
    if (!result.ok()) {
      failed_ = true;
      dropped.swap(waiting_);
      // The step this stream last said would come (one dropped, or the one
      // that just failed before its trainer took it) never will.
      withdrawn = std::move(expected_);
      expected_.reset();
    } else if (!waiting_.empty()) {
      // Room for the client's next step while this answer goes out.
      next = std::move(waiting_.front());
      waiting_.pop_front();
    }
  }
  // This answer first, so that the answers keep the steps' order even when
  // the next one fails at once; running_ stays set meanwhile, so a step
  // added now waits behind `next`.
  answer_(std::move(result), std::move(model));
  if (withdrawn.has_value()) queue_.WithdrawTrainStep(*withdrawn);
  for (Entry& never : dropped) {
    answer_(absl::AbortedError("not run: a step sent before it failed"), std::move(never.model));
  }
  {
    absl::MutexLock lock(&mu_);
    if (!next.has_value() && !failed_ && !waiting_.empty()) {
      next = std::move(waiting_.front());  // Added while the answer went out.
      waiting_.pop_front();
    }
    if (!next.has_value()) {
      running_ = false;
      expected_.reset();  // Taken by its step, or withdrawn: nothing of ours is upcoming.
    }
  }
  if (next.has_value()) Run(std::move(*next));
}

}  // namespace replicad
