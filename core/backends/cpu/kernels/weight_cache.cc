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

dnnl::memory WeightCache::Get(const Tensor& host, const dnnl::memory::desc& plain,
                              const dnnl::memory::desc& blocked) {
  absl::MutexLock lock(&mu_);
  const auto key = std::make_pair(host.raw_data(), SerializeDesc(plain) + SerializeDesc(blocked));
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second.memory;
  dnnl::memory source(plain, engine_, host.raw_data());
  dnnl::memory reordered(blocked, engine_);
  dnnl::reorder(source, reordered).execute(stream_, source, reordered);
  stream_.wait();
  entries_.emplace(key, Entry{host.buffer(), reordered});
  return reordered;
}

size_t WeightCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace replicad
