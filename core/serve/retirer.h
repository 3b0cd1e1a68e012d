#ifndef REPLICAD_CORE_SERVE_RETIRER_H_
#define REPLICAD_CORE_SERVE_RETIRER_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace replicad {

// Frees objects that requests in flight may still hold, on a thread of its
// own. A replica set must not be destroyed on one of its own slot threads (a
// stream cannot join itself), yet the last request to finish on an unloaded
// model does so on a slot thread. So the model manager gives up its
// reference here instead: this keeps one until it is the only one left, then
// drops it. Thread-safe.
class Retirer {
 public:
  Retirer();
  // Frees whatever is left (the caller must have stopped the requests).
  ~Retirer();
  Retirer(const Retirer&) = delete;
  Retirer& operator=(const Retirer&) = delete;

  void Retire(std::shared_ptr<const void> object);

 private:
  void Run();

  absl::Mutex mu_;
  std::vector<std::shared_ptr<const void>> retired_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_RETIRER_H_
