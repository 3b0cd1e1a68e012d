#include "tests/testing/manual_clock.h"

namespace replicad {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(1);

}  // namespace

ManualClock::ManualClock() : now_(absl::FromUnixSeconds(1800000000)) {}

void ManualClock::Advance(absl::Duration by) {
  absl::MutexLock lock(&mu_);
  now_ += by;
}

absl::Time ManualClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

bool ManualClock::WaitWithDeadline(absl::CondVar& condvar, absl::Mutex& mu,
                                   absl::Time deadline) const {
  if (Now() >= deadline) return true;
  if (deadline == absl::InfiniteFuture()) {
    condvar.Wait(&mu);  // No Advance reaches it: only a signal ends the wait.
    return false;
  }
  condvar.WaitWithTimeout(&mu, kPoll);
  return Now() >= deadline;
}

bool ManualClock::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                                    absl::Time deadline) const {
  while (!mu.AwaitWithTimeout(condition, kPoll)) {
    if (Now() >= deadline) return condition.Eval();
  }
  return true;
}

}  // namespace replicad
