#include "core/model/shared_plan_arena.h"

#include <algorithm>

namespace replicad {

void SharedPlanArena::AddPlan(size_t bytes) {
  absl::MutexLock lock(&mu_);
  plans_.insert(bytes);
}

void SharedPlanArena::RemovePlan(size_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = plans_.find(bytes);
  if (it != plans_.end()) plans_.erase(it);
}

absl::StatusOr<char*> SharedPlanArena::Reserve(size_t bytes) {
  size_t largest_alive = bytes;
  {
    absl::MutexLock lock(&mu_);
    if (!plans_.empty()) largest_alive = std::max(largest_alive, *plans_.rbegin());
  }
  const bool grow = buffer_ == nullptr || buffer_->bytes() < bytes;
  const bool shrink = !grow && buffer_->bytes() > largest_alive;
  if (grow || shrink) {
    // Sized for this plan when growing (a larger one alive grows it when it
    // runs), for the largest alive when shrinking (so that the plans alive
    // do not take turns reallocating it). The old buffer goes first, so that
    // memory holds one of them at a time.
    const size_t size = grow ? bytes : largest_alive;
    buffer_.reset();
    absl::StatusOr<std::shared_ptr<Buffer>> grown = device_.Allocate(size);
    if (!grown.ok()) return grown.status();
    buffer_ = *std::move(grown);
  }
  return static_cast<char*>(buffer_->data());
}

}  // namespace replicad
