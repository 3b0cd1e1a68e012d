#include "core/train/upcoming_batch.h"

#include <utility>

namespace replicad {
namespace {

// The same bytes of the same buffer, seen as the same type.
bool SameTensor(const Tensor& a, const Tensor& b) {
  if (a.buffer() != b.buffer()) return false;
  return a.buffer() == nullptr ||
         (a.raw_data() == b.raw_data() && a.dtype() == b.dtype() && a.shape() == b.shape());
}

}  // namespace

bool UpcomingBatch::Is(const std::vector<Tensor>& step_inputs, const Tensor& step_targets) const {
  if (inputs.size() != step_inputs.size() || !SameTensor(targets, step_targets)) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!SameTensor(inputs[i], step_inputs[i])) return false;
  }
  return true;
}

void UpcomingBatches::Expect(std::shared_ptr<const UpcomingBatch> batch) {
  absl::MutexLock lock(&mu_);
  next_ = std::move(batch);
}

void UpcomingBatches::Forget(const std::vector<Tensor>& inputs, const Tensor& targets) {
  absl::MutexLock lock(&mu_);
  if (next_ != nullptr && next_->Is(inputs, targets)) next_ = nullptr;
}

std::shared_ptr<const UpcomingBatch> UpcomingBatches::Next() const {
  absl::MutexLock lock(&mu_);
  return next_;
}

}  // namespace replicad
