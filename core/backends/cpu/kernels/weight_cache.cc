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

WeightCache::WeightCache(dnnl::engine engine)
    : engine_(engine), stream_(engine), state_(std::make_shared<State>()) {}

std::shared_ptr<const dnnl::memory> WeightCache::Get(const Tensor& host,
                                                     const dnnl::memory::desc& plain,
                                                     const dnnl::memory::desc& blocked) {
  // Held over the lookup and the reorder, so that two slots asking for the
  // same copy at once make it once. Deleters take only state_->mu.
  absl::MutexLock stream_lock(&stream_mu_);
  const Key key(host.raw_data(), SerializeDesc(plain) + SerializeDesc(blocked));
  dnnl::memory copy;
  {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->entries.find(key);
    if (it != state_->entries.end()) {
      ++it->second.holders;
      copy = it->second.copy;
    }
  }
  if (!copy) {
    dnnl::memory source(plain, engine_, host.raw_data());
    copy = dnnl::memory(blocked, engine_);
    dnnl::reorder(source, copy).execute(stream_, source, copy);
    stream_.wait();
    absl::MutexLock lock(&state_->mu);
    state_->entries[key] = Entry{host.buffer(), copy, 1};
  }
  // Each holder gets a handle of its own (dnnl::memory shares the bytes);
  // dropping it counts the entry's holders down.
  return std::shared_ptr<const dnnl::memory>(
      new dnnl::memory(copy), [state = state_, key](const dnnl::memory* handle) {
        delete handle;
        // Declared before the lock, so released after it.
        std::shared_ptr<Buffer> host;
        dnnl::memory last;
        absl::MutexLock lock(&state->mu);
        auto it = state->entries.find(key);
        if (it != state->entries.end() && --it->second.holders == 0) {
          host = std::move(it->second.host);
          last = std::move(it->second.copy);
          state->entries.erase(it);
        }
      });
}

size_t WeightCache::size() const {
  absl::MutexLock lock(&state_->mu);
  return state_->entries.size();
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
