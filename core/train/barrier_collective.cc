#include "core/train/barrier_collective.h"

#include <algorithm>
#include <utility>

namespace replicad {

BarrierCollective::BarrierCollective(int participants, Across across)
    : participants_(participants), across_(std::move(across)), posted_(participants, nullptr) {}

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
    if (across_ != nullptr) {
      // The others wait on this round meanwhile: they need the job's sum.
      if (absl::Status s = across_(result_.data(), count); !s.ok()) {
        status_ = std::move(s);
        aborted_ = true;
        return;
      }
    }
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

absl::Status BarrierCollective::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void BarrierCollective::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
}

}  // namespace replicad
