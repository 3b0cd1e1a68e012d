#include "core/model/shared_plan_arena.h"

namespace replicad {

absl::StatusOr<char*> SharedPlanArena::Reserve(size_t bytes) {
  if (buffer_ == nullptr || buffer_->bytes() < bytes) {
    // The old buffer goes first, so that memory holds one of them at a time.
    buffer_.reset();
    absl::StatusOr<std::shared_ptr<Buffer>> grown = device_.Allocate(bytes);
    if (!grown.ok()) return grown.status();
    buffer_ = *std::move(grown);
  }
  return static_cast<char*>(buffer_->data());
}

}  // namespace replicad
