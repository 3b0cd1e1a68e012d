#include "core/train/barrier_collective.h"

#include <algorithm>

namespace replicad {

BarrierCollective::BarrierCollective(int participants)
    : participants_(participants), posted_(participants, nullptr) {}

void BarrierCollective::AllReduceSum(int participant, double* data, size_t count) {
  absl::MutexLock lock(&mu_);
  if (aborted_) return;
  const int64_t round = round_;
  posted_[participant] = data;
  if (++arrived_ == participants_) {
    result_.assign(count, 0.0);
    for (double* posted : posted_) {
      for (size_t k = 0; k < count; ++k) result_[k] += posted[k];
    }
    arrived_ = 0;
    ++round_;
  } else {
    struct RoundDone {
      const int64_t* round;
      int64_t seen;
      const bool* aborted;
      bool operator()() const { return *round != seen || *aborted; }
    };
    const RoundDone done{&round_, round, &aborted_};
    mu_.Await(absl::Condition(&done));
    if (aborted_) return;
  }
  std::copy(result_.begin(), result_.begin() + count, data);
}

void BarrierCollective::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
}

}  // namespace replicad
