#include "core/backends/cpu/openmp_team_park.h"

#include <omp.h>

namespace replicad {

void OpenMpTeamPark::Park(absl::FunctionRef<void()> sleep) {
  if (threads_ <= 1) {
    sleep();
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    master_awake_ = false;
  }
#pragma omp parallel num_threads(threads_)
  {
    if (omp_get_thread_num() == 0) {
      sleep();
      absl::MutexLock lock(&mu_);
      master_awake_ = true;
    } else {
      // Shared: the master's one unlock then wakes every worker at once,
      // not one after another.
      absl::ReaderMutexLock lock(&mu_);
      parked_.fetch_add(1, std::memory_order_relaxed);
      mu_.Await(absl::Condition(&master_awake_));
      parked_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

int OpenMpTeamPark::parked_threads() const { return parked_.load(std::memory_order_relaxed); }

}  // namespace replicad
