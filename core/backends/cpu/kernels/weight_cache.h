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
// primitives prefer, made once per CPU slot and shared by every kernel that
// reads the same host tensor in the same layout, so a model served at many
// slice sizes (one plan each) holds its reordered weights once, not per plan.
// Thread-safe; reorders run on a stream of the cache's own, never on the
// slot's stream, which may be running a request at the same time.
class WeightCache {
 public:
  explicit WeightCache(dnnl::engine engine);

  // `host` (row-major, read as `plain`) in the layout `blocked`. The cache
  // keeps host's buffer alive, so the key can never be reused by another tensor.
  dnnl::memory Get(const Tensor& host, const dnnl::memory::desc& plain,
                   const dnnl::memory::desc& blocked);
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<Buffer> pinned;
    dnnl::memory memory;
  };

  dnnl::engine engine_;
  mutable absl::Mutex mu_;
  dnnl::stream stream_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<const void*, std::string>, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// A oneDNN 2.x memory descriptor as bytes (it is a plain C struct), and back:
// how a layout travels between kernels and keys caches.
std::string SerializeDesc(const dnnl::memory::desc& desc);
std::optional<dnnl::memory::desc> DeserializeDesc(const std::string& bytes);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_WEIGHT_CACHE_H_
