#ifndef REPLICAD_CORE_SERVE_REQUEST_QUEUE_H_
#define REPLICAD_CORE_SERVE_REQUEST_QUEUE_H_

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/serve/scheduled_request.h"
#include "core/serve/scheduler_options.h"

namespace replicad {

// A model's waiting requests, in Triton's dispatch order: level 1 before
// level 2, and within a level, arrival order, those that timed out under a
// DELAY policy after those that did not. Not thread-safe (its scheduler
// locks it).
class RequestQueue {
 public:
  // `options` must be valid and outlive the queue.
  explicit RequestQueue(const SchedulerOptions& options);

  // Queues `request` at the level its priority names, with its policy's
  // timeout (its context's `timeout` shortening it where the policy allows).
  // Unavailable, leaving `request` with the caller, when that level already
  // holds its max_queue_size.
  absl::Status Push(std::unique_ptr<ScheduledRequest>& request, absl::Time now);

  // Takes out the requests that must not run, each with its answer: past
  // its deadline (DeadlineExceeded), cancelled (Cancelled), past its policy
  // timeout under REJECT (DeadlineExceeded). Those past it under DELAY move
  // behind their level's others.
  using Expired = std::pair<std::unique_ptr<ScheduledRequest>, absl::Status>;
  std::vector<Expired> Expire(absl::Time now);

  // Visits the requests in dispatch order while `visit` returns true.
  void Visit(absl::FunctionRef<bool(const ScheduledRequest&)> visit) const;
  // The first request in dispatch order (null when empty), still queued.
  const ScheduledRequest* Front() const;
  // Takes the first request in dispatch order; null when empty.
  std::unique_ptr<ScheduledRequest> Pop();

  // The soonest deadline or policy timeout among the queued requests.
  absl::Time NextExpiry() const;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  struct Level {
    std::deque<std::unique_ptr<ScheduledRequest>> fresh, delayed;
  };
  const SchedulerOptions& options_;
  std::vector<Level> levels_;  // [level - 1].
  size_t size_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REQUEST_QUEUE_H_
