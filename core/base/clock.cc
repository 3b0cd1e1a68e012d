#include "core/base/clock.h"

#include "absl/time/clock.h"

namespace replicad {
namespace {

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool WaitWithDeadline(absl::CondVar& condvar, absl::Mutex& mu,
                        absl::Time deadline) const override {
    return condvar.WaitWithDeadline(&mu, deadline);
  }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                         absl::Time deadline) const override {
    return mu.AwaitWithDeadline(condition, deadline);
  }
};

}  // namespace

const Clock* RealClock() {
  static const SystemClock* const clock = new SystemClock;
  return clock;
}

}  // namespace replicad
