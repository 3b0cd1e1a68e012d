#ifndef REPLICAD_TESTS_TESTING_MANUAL_CLOCK_H_
#define REPLICAD_TESTS_TESTING_MANUAL_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace replicad {

// A Clock that moves only when a test advances it, so that a test of a
// timeout, a queue delay or a deadline states the time that passed instead
// of sleeping for it. Waiters poll it every millisecond of real time (it
// cannot signal the condition variables of the code under test), so an
// Advance is seen within about a millisecond. Thread-safe.
class ManualClock final : public Clock {
 public:
  // Starts at a fixed, ordinary date (not the Unix epoch, so that a
  // deadline computed as Now() - 1s is still a real time).
  ManualClock();

  void Advance(absl::Duration by);

  absl::Time Now() const override;
  bool WaitWithDeadline(absl::CondVar& condvar, absl::Mutex& mu,
                        absl::Time deadline) const override;
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                         absl::Time deadline) const override;

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_TESTS_TESTING_MANUAL_CLOCK_H_
