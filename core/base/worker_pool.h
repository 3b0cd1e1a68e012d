#ifndef REPLICAD_CORE_BASE_WORKER_POOL_H_
#define REPLICAD_CORE_BASE_WORKER_POOL_H_

#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace replicad {

// A fixed set of threads running submitted tasks in submission order (one
// thread: strictly one after another). The serving core's work that may
// block (building plans, training steps, loading models) runs here, so the
// protocols' threads never do. Thread-safe.
class WorkerPool {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  explicit WorkerPool(int threads);
  // Runs every task already submitted, then joins the threads. Must not be
  // called from one of them.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(Task task);

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BASE_WORKER_POOL_H_
