#include "core/serve/repository_poller.h"

namespace replicad {

RepositoryPoller::RepositoryPoller(ModelManager& models, absl::Duration interval,
                                   std::function<void(const absl::Status&)> on_error)
    : models_(models),
      interval_(interval),
      on_error_(std::move(on_error)),
      thread_([this] { Run(); }) {}

RepositoryPoller::~RepositoryPoller() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void RepositoryPoller::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_)) return;
    }
    absl::Status status = models_.Poll();
    if (!status.ok() && on_error_) on_error_(status);
  }
}

}  // namespace replicad
