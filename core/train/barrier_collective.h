#ifndef REPLICAD_CORE_TRAIN_BARRIER_COLLECTIVE_H_
#define REPLICAD_CORE_TRAIN_BARRIER_COLLECTIVE_H_

#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/device/run_context.h"

namespace replicad {

// StepCollective for slots whose memory the host reads (CPU slots): each
// participant posts a pointer to its data; the last to arrive sums them in
// participant order into one result, which every participant copies back.
// A round completes only once all participants arrived, and a participant
// copies before it can arrive at the next round, so one result buffer serves.
//
// With `across` (a training job of several processes), the last to arrive
// also hands the process's sum to it, which replaces it with the job's; if
// that fails, the round and every later one abort as Abort does, and
// status() tells why.
class BarrierCollective : public StepCollective {
 public:
  using Across = std::function<absl::Status(double* data, size_t count)>;
  explicit BarrierCollective(int participants, Across across = nullptr);
  void AllReduceSum(int participant, double* data, size_t count) override;
  void Abort() override;
  // The failure of `across`, if any.
  absl::Status status() const;

 private:
  const int participants_;
  const Across across_;
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<double*> posted_ ABSL_GUARDED_BY(mu_);
  std::vector<double> result_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_BARRIER_COLLECTIVE_H_
