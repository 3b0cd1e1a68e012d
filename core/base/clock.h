#ifndef REPLICAD_CORE_BASE_CLOCK_H_
#define REPLICAD_CORE_BASE_CLOCK_H_

#include <chrono>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace replicad {

// The time the serving core schedules by: deadlines, queue delays, timeouts
// and cancellation polls. Production uses RealClock(); tests pass a clock
// they advance by hand (tests/testing/manual_clock.h), so a test of a 100 ms
// queue delay takes no 100 ms and cannot flake on a loaded machine.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Waits on `condvar` with `mu` held (as absl::CondVar::WaitWithDeadline)
  // until it is signalled or this clock reaches `deadline`; may return
  // early (callers re-check their state in a loop). Returns true when the
  // deadline has passed.
  virtual bool WaitWithDeadline(absl::CondVar& condvar, absl::Mutex& mu,
                                absl::Time deadline) const = 0;

  // Waits with `mu` held until `condition` holds or this clock reaches
  // `deadline` (as absl::Mutex::AwaitWithDeadline); returns whether it holds.
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                                 absl::Time deadline) const = 0;
};

// absl::Now(), and Abseil's own waits. Never null; lives forever.
const Clock* RealClock();

// Seconds from `start` until now on the steady clock: a duration measured
// for metrics and reports (not a schedule, which Clock keeps).
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BASE_CLOCK_H_
