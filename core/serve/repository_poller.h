#ifndef REPLICAD_CORE_SERVE_REPOSITORY_POLLER_H_
#define REPLICAD_CORE_SERVE_REPOSITORY_POLLER_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/serve/model_manager.h"

namespace replicad {

// --model-control-mode poll: every `interval`, has the manager load what is
// new or changed in the repository and unload what is gone, on a thread of
// its own. A poll's error (a model that fails to load) goes to `on_error`
// and changes nothing else; the next change of its files tries again.
class RepositoryPoller {
 public:
  RepositoryPoller(ModelManager& models, absl::Duration interval,
                   std::function<void(const absl::Status&)> on_error);
  // Stops polling (waits for a poll in progress).
  ~RepositoryPoller();
  RepositoryPoller(const RepositoryPoller&) = delete;
  RepositoryPoller& operator=(const RepositoryPoller&) = delete;

 private:
  void Run();

  ModelManager& models_;
  const absl::Duration interval_;
  const std::function<void(const absl::Status&)> on_error_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REPOSITORY_POLLER_H_
