#include "core/backends/cpu/kernels/weight_cache.h"

#include <cstring>

namespace replicad {

std::string SerializeDesc(const dnnl::memory::desc& desc) {
  return std::string(reinterpret_cast<const char*>(&desc.data), sizeof(desc.data));
}

std::optional<dnnl::memory::desc> DeserializeDesc(const std::string& bytes) {
  if (bytes.size() != sizeof(dnnl_memory_desc_t)) return std::nullopt;
  dnnl_memory_desc_t raw;
  std::memcpy(&raw, bytes.data(), sizeof(raw));
  return dnnl::memory::desc(raw);
}

WeightCache::WeightCache(dnnl::engine engine) : engine_(engine), stream_(engine) {}

std::shared_ptr<const dnnl::memory> WeightCache::Get(const Tensor& host,
                                                     const dnnl::memory::desc& plain,
                                                     const dnnl::memory::desc& blocked) {
  absl::MutexLock lock(&mu_);
  ForgetReleased();
  const auto key = std::make_pair(host.raw_data(), SerializeDesc(plain) + SerializeDesc(blocked));
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    if (std::shared_ptr<const dnnl::memory> copy = it->second.copy.lock()) return copy;
  }
  dnnl::memory source(plain, engine_, host.raw_data());
  auto copy = std::make_shared<dnnl::memory>(blocked, engine_);
  dnnl::reorder(source, *copy).execute(stream_, source, *copy);
  stream_.wait();
  entries_[key] = Entry{host.buffer(), copy};
  return copy;
}

void WeightCache::ForgetReleased() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.host.expired() || it->second.copy.expired() ? entries_.erase(it) : ++it;
  }
}

size_t WeightCache::size() const {
  absl::MutexLock lock(&mu_);
  size_t held = 0;
  for (const auto& [key, entry] : entries_)
    held += entry.host.expired() || entry.copy.expired() ? 0 : 1;
  return held;
}

const dnnl::engine& HostEngine() {
  static const dnnl::engine* const engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

std::shared_ptr<WeightCache> HostWeightCache() {
  static const std::shared_ptr<WeightCache>* const cache =
      new std::shared_ptr<WeightCache>(std::make_shared<WeightCache>(HostEngine()));
  return *cache;
}

}  // namespace replicad
