#include "core/device/host_stream.h"

#include <chrono>
#include <thread>

namespace replicad {

HostStream::HostStream(absl::AnyInvocable<void() &&> on_start,
                       absl::AnyInvocable<void(absl::FunctionRef<void()> sleep)> around_long_sleep)
    : around_long_sleep_(std::move(around_long_sleep)),
      thread_([this, start = std::move(on_start)]() mutable { Loop(std::move(start)); }) {}

HostStream::~HostStream() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void HostStream::Enqueue(absl::AnyInvocable<void() &&> work) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
  pending_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<Event> HostStream::RecordEvent() {
  auto event = std::make_shared<HostEvent>();
  Enqueue([event] { event->Signal(); });
  return event;
}

void HostStream::Synchronize() { RecordEvent()->Wait(); }

void HostStream::Loop(absl::AnyInvocable<void() &&> on_start) {
  if (on_start) std::move(on_start)();
  while (true) {
    absl::AnyInvocable<void() &&> work;
    // Requests tend to arrive back to back: spinning briefly before sleeping
    // saves the wake-up (tens of microseconds) that would otherwise dominate
    // the cost of a small request.
    const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
    // Yielding keeps the spin from starving other threads when slots
    // outnumber cores.
    while (pending_.load(std::memory_order_acquire) == 0 &&
           std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    if (around_long_sleep_ && pending_.load(std::memory_order_acquire) == 0) {
      bool woken;
      {
        absl::MutexLock lock(&mu_);
        woken = mu_.AwaitWithTimeout(absl::Condition(this, &HostStream::HasWorkOrIsStopping),
                                     kLongIdle);
      }
      if (!woken) around_long_sleep_([this] { SleepUntilWorkOrStopping(); });
    }
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &HostStream::HasWorkOrIsStopping));
      if (queue_.empty()) return;  // stopping_ and drained.
      work = std::move(queue_.front());
      queue_.pop_front();
      pending_.fetch_sub(1, std::memory_order_relaxed);
    }
    std::move(work)();
  }
}

void HostStream::SleepUntilWorkOrStopping() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &HostStream::HasWorkOrIsStopping));
}

void HostEvent::Signal() {
  absl::MutexLock lock(&mu_);
  ready_ = true;
}

void HostEvent::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&ready_));
}

bool HostEvent::IsReady() {
  absl::MutexLock lock(&mu_);
  return ready_;
}

}  // namespace replicad
