#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_WEIGHT_CACHE_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_WEIGHT_CACHE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/tensor/tensor.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// Internal to the CPU kernels: weights reordered into the layouts oneDNN's
// primitives prefer, made once and shared by every kernel that reads the same
// host tensor in the same layout: a model served at many slice sizes (one plan
// each) on several slots holds each reordered copy once, not per plan and
// slot. A copy lives as long as some kernel holds it, so plans that are
// evicted or models that are unloaded take their copies with them.
// Thread-safe; reorders run on a stream of the cache's own, never on a slot's
// stream, which may be running a request at the same time.
class WeightCache {
 public:
  explicit WeightCache(dnnl::engine engine);

  // `host` (row-major, read as `plain`) in the layout `blocked`: the copy a
  // kernel already holds, else a new one. While any holder lives, the cache
  // also holds `host`, so its address cannot be taken by another tensor.
  std::shared_ptr<const dnnl::memory> Get(const Tensor& host, const dnnl::memory::desc& plain,
                                          const dnnl::memory::desc& blocked);
  // How many copies kernels hold.
  size_t size() const;

 private:
  using Key = std::pair<const void*, std::string>;
  struct Entry {
    std::shared_ptr<Buffer> host;
    dnnl::memory copy;
    int holders = 0;
  };
  // Shared with the deleters of the handed-out copies, which count their
  // holders down (on whichever thread drops one) and drop an entry at zero.
  // Counted by hand rather than with weak_ptr: ThreadSanitizer misreads
  // libstdc++ 12's release of a shared_ptr whose weak count another thread
  // changed.
  struct State {
    absl::Mutex mu;
    std::map<Key, Entry> entries ABSL_GUARDED_BY(mu);
  };

  dnnl::engine engine_;
  absl::Mutex stream_mu_;  // Reorders of different entries run one at a time.
  dnnl::stream stream_ ABSL_GUARDED_BY(stream_mu_);
  std::shared_ptr<State> state_;
};

// The process's one oneDNN CPU engine and the weight cache on it. Every CPU
// slot makes its primitives and stream on this engine, so that one slot's
// kernels may bind the copies another slot's made: the slots of a model share
// them (on one socket they read the same memory anyway).
const dnnl::engine& HostEngine();
std::shared_ptr<WeightCache> HostWeightCache();

// A oneDNN 2.x memory descriptor as bytes (it is a plain C struct), and back:
// how a layout travels between kernels and keys caches.
std::string SerializeDesc(const dnnl::memory::desc& desc);
std::optional<dnnl::memory::desc> DeserializeDesc(const std::string& bytes);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_WEIGHT_CACHE_H_
