#include "core/serve/request_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace replicad {

RequestQueue::RequestQueue(const SchedulerOptions& options)
    : options_(options), levels_(std::max<uint32_t>(1, options.priority_levels)) {}

absl::Status RequestQueue::Push(std::unique_ptr<ScheduledRequest>& request, absl::Time now) {
  const uint32_t level = options_.LevelOf(request->context.priority);
  const QueuePolicy& policy = options_.PolicyOf(level);
  Level& queue = levels_[level - 1];
  const size_t held = queue.fresh.size() + queue.delayed.size();
  if (policy.max_queue_size > 0 && held >= policy.max_queue_size) {
    return absl::UnavailableError(absl::StrCat(
        "the queue of priority level ", level, " is full: it holds at most ", policy.max_queue_size,
        " requests (max_queue_size); retry later or elsewhere"));
  }
  absl::Duration timeout = policy.default_timeout;
  const absl::Duration asked = request->context.timeout;
  if (policy.allow_timeout_override && asked > absl::ZeroDuration() &&
      (timeout == absl::ZeroDuration() || asked < timeout)) {
    timeout = asked;
  }
  request->level = level;
  request->enqueued = now;
  request->timeout_at = timeout > absl::ZeroDuration() ? now + timeout : absl::InfiniteFuture();
  request->delayed = false;
  queue.fresh.push_back(std::move(request));
  ++size_;
  return absl::OkStatus();
}

std::vector<RequestQueue::Expired> RequestQueue::Expire(absl::Time now) {
  std::vector<Expired> expired;
  for (size_t l = 0; l < levels_.size(); ++l) {
    Level& level = levels_[l];
    const QueuePolicy& policy = options_.PolicyOf(static_cast<uint32_t>(l + 1));
    std::deque<std::unique_ptr<ScheduledRequest>> kept;
    for (auto* queue : {&level.fresh, &level.delayed}) {
      kept.clear();
      for (std::unique_ptr<ScheduledRequest>& request : *queue) {
        absl::Status wanted = request->context.StillWanted("while queued", now);
        if (wanted.ok() && !request->delayed && now >= request->timeout_at) {
          if (policy.timeout_action == QueuePolicy::TimeoutAction::kDelay) {
            request->delayed = true;
            level.delayed.push_back(std::move(request));
            continue;
          }
          wanted = absl::DeadlineExceededError(
              absl::StrCat("the request waited ", absl::FormatDuration(now - request->enqueued),
                           " in the queue, past its timeout of ",
                           absl::FormatDuration(request->timeout_at - request->enqueued)));
        }
        if (wanted.ok()) {
          kept.push_back(std::move(request));
        } else {
          expired.emplace_back(std::move(request), std::move(wanted));
          --size_;
        }
      }
      // Requests moved to `delayed` on the fresh pass were appended there,
      // so the delayed pass keeps them behind those delayed before.
      queue->swap(kept);
    }
  }
  return expired;
}

void RequestQueue::Visit(absl::FunctionRef<bool(const ScheduledRequest&)> visit) const {
  for (const Level& level : levels_) {
    for (const auto* queue : {&level.fresh, &level.delayed}) {
      for (const std::unique_ptr<ScheduledRequest>& request : *queue) {
        if (!visit(*request)) return;
      }
    }
  }
}

const ScheduledRequest* RequestQueue::Front() const {
  const ScheduledRequest* front = nullptr;
  Visit([&](const ScheduledRequest& request) {
    front = &request;
    return false;
  });
  return front;
}

std::unique_ptr<ScheduledRequest> RequestQueue::Pop() {
  for (Level& level : levels_) {
    for (auto* queue : {&level.fresh, &level.delayed}) {
      if (queue->empty()) continue;
      std::unique_ptr<ScheduledRequest> request = std::move(queue->front());
      queue->pop_front();
      --size_;
      return request;
    }
  }
  return nullptr;
}

absl::Time RequestQueue::NextExpiry() const {
  absl::Time next = absl::InfiniteFuture();
  for (const Level& level : levels_) {
    for (const auto* queue : {&level.fresh, &level.delayed}) {
      for (const std::unique_ptr<ScheduledRequest>& request : *queue) {
        next = std::min(next, request->context.deadline);
        if (!request->delayed) next = std::min(next, request->timeout_at);
      }
    }
  }
  return next;
}

}  // namespace replicad
