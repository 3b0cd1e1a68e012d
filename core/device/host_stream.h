#ifndef REPLICAD_CORE_DEVICE_HOST_STREAM_H_
#define REPLICAD_CORE_DEVICE_HOST_STREAM_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/device/device.h"

namespace replicad {

// An in-order executor: one dedicated thread runs submitted work in
// submission order. It is the stream of a CPU slot and the host side of a GPU
// slot. Thread-safe. The destructor runs what is queued, then joins.
class HostStream {
 public:
  // `on_start` runs first on the new thread (e.g. to set its OpenMP thread count).
  // `around_long_sleep`, when given, is called on that thread each time the
  // stream, out of work, has spun (50 us) and then waited kLongIdle more
  // without any coming; it must call `sleep` (which returns
  // once there is work or the stream is being destroyed) and may hold
  // resources idle around it (a CPU slot parks its OpenMP team there).
  explicit HostStream(
      absl::AnyInvocable<void() &&> on_start,
      absl::AnyInvocable<void(absl::FunctionRef<void()> sleep)> around_long_sleep = nullptr);

  // Requests that come closer together than this (a client's next small
  // request, the next phase of a training step) find the stream as it was.
  static constexpr absl::Duration kLongIdle = absl::Milliseconds(1);
  ~HostStream();

  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  void Enqueue(absl::AnyInvocable<void() &&> work);
  // Ready once everything enqueued before it has run.
  std::shared_ptr<Event> RecordEvent();
  // Blocks until everything enqueued so far has run.
  void Synchronize();
  // True on the stream's own thread: a blocking wait there would deadlock.
  bool IsStreamThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Loop(absl::AnyInvocable<void() &&> on_start);
  void SleepUntilWorkOrStopping();
  bool HasWorkOrIsStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }

  static constexpr std::chrono::microseconds kSpinBeforeSleep{50};

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> pending_{0};  // queue_.size(), readable without the lock.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::AnyInvocable<void(absl::FunctionRef<void()>)> around_long_sleep_;
  std::thread thread_;  // Last: it starts running Loop in the constructor.
};

// An Event signalled from host code.
class HostEvent : public Event {
 public:
  void Signal();
  void Wait() override;
  bool IsReady() override;

 private:
  absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_HOST_STREAM_H_
