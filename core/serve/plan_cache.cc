#include "core/serve/plan_cache.h"

#include <algorithm>
#include <utility>

namespace replicad {

std::shared_ptr<ExecutionPlan> PlanCache::Find(const std::vector<Shape>& shapes) {
  auto it = plans_.find(shapes);
  if (it == plans_.end()) return nullptr;
  it->second.last_use = ++clock_;
  return it->second.plan;
}

std::optional<PlanCache::Entry> PlanCache::TakeOldestIfFull() {
  if (plans_.size() < max_plans_) return std::nullopt;
  return TakeOldest();
}

void PlanCache::Restore(Entry entry) {
  std::vector<Shape> shapes = entry.shapes;
  plans_.emplace(std::move(shapes), std::move(entry));
}

bool PlanCache::FitsAlone(size_t own_bytes, size_t shared_bytes) const {
  return max_bytes_ == 0 || own_bytes + shared_bytes <= max_bytes_;
}

std::vector<std::shared_ptr<ExecutionPlan>> PlanCache::Insert(Entry entry) {
  entry.last_use = ++clock_;
  std::vector<std::shared_ptr<ExecutionPlan>> taken;
  while (max_bytes_ > 0 && BytesWith(&entry) > max_bytes_) {
    std::optional<Entry> oldest = TakeOldest();
    if (!oldest.has_value()) break;  // The entry alone is over the bound (see FitsAlone).
    taken.push_back(std::move(oldest->plan));
  }
  Restore(std::move(entry));
  return taken;
}

// A scan of at most max_plans entries, once per build: nothing beside the build.
std::optional<PlanCache::Entry> PlanCache::TakeOldest() {
  if (plans_.empty()) return std::nullopt;
  auto oldest = plans_.begin();
  for (auto p = plans_.begin(); p != plans_.end(); ++p) {
    if (p->second.last_use < oldest->second.last_use) oldest = p;
  }
  Entry taken = std::move(oldest->second);
  plans_.erase(oldest);
  return taken;
}

size_t PlanCache::BytesWith(const Entry* extra) const {
  size_t own = 0, shared = 0;
  auto add = [&](const Entry& entry) {
    own += entry.own_bytes;
    shared = std::max(shared, entry.shared_bytes);
  };
  for (const auto& [shapes, entry] : plans_) add(entry);
  if (extra != nullptr) add(*extra);
  return own + shared;
}

}  // namespace replicad
