#ifndef REPLICAD_CORE_TRAIN_UPCOMING_BATCH_H_
#define REPLICAD_CORE_TRAIN_UPCOMING_BATCH_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/tensor/tensor.h"

namespace replicad {

// A batch a trainer's caller expects to step on next (a stream's next
// message, already received), so that the trainer can upload it to its
// devices while the current step computes (input_prefetch.h). Its tensors
// are host tensors that own their bytes, unchanged while anyone holds them:
// a trainer recognises the batch again by its tensors' addresses.
struct UpcomingBatch {
  std::vector<Tensor> inputs;  // As ModelTrainer::Step takes them.
  Tensor targets;

  // Whether `inputs` and `targets` are this batch's own tensors (the same
  // bytes, shapes and types), as a caller hands them to Step.
  bool Is(const std::vector<Tensor>& step_inputs, const Tensor& step_targets) const;
};

// Where a caller posts its upcoming batch and a trainer reads it, from any
// thread. Posting replaces the one before.
class UpcomingBatches {
 public:
  void Expect(std::shared_ptr<const UpcomingBatch> batch) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the upcoming batch when it is the one given (now being
  // stepped, or never to be); another stays.
  void Forget(const std::vector<Tensor>& inputs, const Tensor& targets) ABSL_LOCKS_EXCLUDED(mu_);
  // The latest posted, or null.
  std::shared_ptr<const UpcomingBatch> Next() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const UpcomingBatch> next_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_UPCOMING_BATCH_H_
