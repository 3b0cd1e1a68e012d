#ifndef REPLICAD_CORE_METRICS_COUNTER_H_
#define REPLICAD_CORE_METRICS_COUNTER_H_

#include <atomic>

#include "core/metrics/atomic_double.h"

namespace replicad {
namespace metrics {

// A monotonically increasing total (requests served, bytes received), exported
// as a Prometheus counter. Starts at 0. Thread-safe and lock-free; get one from
// CounterFamily::WithLabels and cache the reference.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `amount`. A negative or NaN amount is ignored: a counter that went
  // down would read as a process restart to rate(), and a NaN would stick
  // forever.
  void Increment(double amount = 1.0) {
    if (!(amount >= 0.0)) return;
    AtomicAdd(value_, amount);
  }

  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_COUNTER_H_
