#ifndef REPLICAD_CORE_SERVE_PLAN_CACHE_H_
#define REPLICAD_CORE_SERVE_PLAN_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/model/execution_plan.h"
#include "core/tensor/shape.h"

namespace replicad {

// A slot's execution plans by input shapes, bounded by count and,
// optionally, by bytes; the least recently used plan leaves first. A plan
// counts its own bytes (its buffers, a device slot's input/output set), and
// the plans' shared arena counts once, as large as the largest plan's
// shared bytes (SharedPlanArena). The cache only holds references: it never
// reads a plan. Not thread-safe: its Replica locks it.
class PlanCache {
 public:
  struct Entry {
    std::vector<Shape> shapes;
    std::shared_ptr<ExecutionPlan> plan;
    size_t own_bytes = 0, shared_bytes = 0;
    uint64_t last_use = 0;  // A tick of the cache's clock: the smallest leaves first.
  };

  // `max_plans` >= 1; `max_bytes` 0: no bound on bytes.
  PlanCache(size_t max_plans, size_t max_bytes) : max_plans_(max_plans), max_bytes_(max_bytes) {}

  // The plan cached for `shapes`, now its most recent use; null when none.
  std::shared_ptr<ExecutionPlan> Find(const std::vector<Shape>& shapes);
  // When the cache holds max_plans, takes the least recently used out, so
  // that a plan about to be built may reuse its memory; Restore puts it
  // back when the new plan is not cached after all.
  std::optional<Entry> TakeOldestIfFull();
  void Restore(Entry entry);
  // Whether a plan of these bytes fits the bound alone (one that does not
  // runs uncached).
  bool FitsAlone(size_t own_bytes, size_t shared_bytes) const;
  // Caches `entry` as the most recent use, first taking out the least
  // recently used plans until the bytes bound holds with it; returns those
  // plans, for the caller to let go of outside its lock.
  std::vector<std::shared_ptr<ExecutionPlan>> Insert(Entry entry);

  // The cached plans' bytes: their own, plus the largest shared.
  size_t bytes() const { return BytesWith(nullptr); }
  size_t size() const { return plans_.size(); }
  size_t max_plans() const { return max_plans_; }

 private:
  std::optional<Entry> TakeOldest();
  size_t BytesWith(const Entry* extra) const;

  const size_t max_plans_;
  const size_t max_bytes_;
  std::map<std::vector<Shape>, Entry> plans_;
  uint64_t clock_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_PLAN_CACHE_H_
