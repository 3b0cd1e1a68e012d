#include "core/serve/retirer.h"

#include <algorithm>

namespace replicad {

Retirer::Retirer() : thread_([this] { Run(); }) {}

Retirer::~Retirer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Retirer::Retire(std::shared_ptr<const void> object) {
  if (object == nullptr) return;
  absl::MutexLock lock(&mu_);
  retired_.push_back(std::move(object));
}

void Retirer::Run() {
  // Polling, not a wake-up from the last holder: holders are plain
  // shared_ptrs (a request's), which cannot tell anyone they let go.
  constexpr absl::Duration kInterval = absl::Milliseconds(20);
  for (;;) {
    std::vector<std::shared_ptr<const void>> unused;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kInterval);
      stopping = stopping_;
      // use_count() is exact here: nobody can take a new reference to a
      // retired object, only drop theirs.
      auto last = std::partition(retired_.begin(), retired_.end(),
                                 [](const auto& object) { return object.use_count() > 1; });
      unused.assign(std::make_move_iterator(last), std::make_move_iterator(retired_.end()));
      retired_.erase(last, retired_.end());
      if (stopping) {
        unused.insert(unused.end(), std::make_move_iterator(retired_.begin()),
                      std::make_move_iterator(retired_.end()));
        retired_.clear();
      }
    }
    unused.clear();  // Destroyed here, outside the lock.
    if (stopping) return;
  }
}

}  // namespace replicad
