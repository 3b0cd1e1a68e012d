#ifndef REPLICAD_CORE_METRICS_ATOMIC_DOUBLE_H_
#define REPLICAD_CORE_METRICS_ATOMIC_DOUBLE_H_

#include <atomic>

namespace replicad {
namespace metrics {

static_assert(std::atomic<double>::is_always_lock_free,
              "metric updates must not take a lock on the hot path");

// Adds `delta` to `value` without a lock. std::atomic<double>::fetch_add is
// C++20; this is the C++17 equivalent. Relaxed ordering: a metric orders
// nothing else, readers only need an untorn value.
inline void AtomicAdd(std::atomic<double>& value, double delta) {
  double old = value.load(std::memory_order_relaxed);
  while (!value.compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
  }
}

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_ATOMIC_DOUBLE_H_
