#ifndef REPLICAD_CORE_DEVICE_POLL_BACKOFF_H_
#define REPLICAD_CORE_DEVICE_POLL_BACKOFF_H_

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace replicad {

// The pause between polls of a wait that must stay bounded (a blocking MPI
// or NCCL call that waits for a peer that died never returns, so such
// waits poll against a deadline). For the first `spin` it only yields the
// core: what a step waits for usually comes within tens of microseconds,
// and the shortest sleep the kernel grants is about 60. Then it sleeps,
// from 5 us doubling up to `longest` (the most a wait overruns what it
// waits for).
class PollBackoff {
 public:
  explicit PollBackoff(absl::Duration longest = absl::Microseconds(100),
                       absl::Duration spin = absl::Microseconds(200))
      : longest_(longest), spin_until_(absl::Now() + spin) {}

  void Wait() {
    if (absl::Now() < spin_until_) {
      std::this_thread::yield();
      return;
    }
    absl::SleepFor(wait_);
    wait_ = std::min(wait_ * 2, longest_);
  }

 private:
  const absl::Duration longest_;
  const absl::Time spin_until_;
  absl::Duration wait_ = absl::Microseconds(5);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_POLL_BACKOFF_H_
