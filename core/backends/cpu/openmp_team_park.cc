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
      absl::MutexLock lock(&mu_);
      ++parked_;
      mu_.Await(absl::Condition(&master_awake_));
      --parked_;
    }
  }
}

int OpenMpTeamPark::parked_threads() const {
  absl::MutexLock lock(&mu_);
  return parked_;
}

}  // namespace replicad
