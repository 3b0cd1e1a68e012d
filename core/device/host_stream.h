#ifndef REPLICAD_CORE_DEVICE_HOST_STREAM_H_
#define REPLICAD_CORE_DEVICE_HOST_STREAM_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device.h"

namespace replicad {

// An in-order executor: one dedicated thread runs submitted work in
// submission order. It is the stream of a CPU slot and the host side of a GPU
// slot. Thread-safe. The destructor runs what is queued, then joins.
class HostStream {
 public:
  // `on_start` runs first on the new thread (e.g. to set its OpenMP thread count).
  explicit HostStream(absl::AnyInvocable<void() &&> on_start);
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

  static constexpr std::chrono::microseconds kSpinBeforeSleep{50};

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> pending_{0};  // queue_.size(), readable without the lock.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
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
