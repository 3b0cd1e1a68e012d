#ifndef REPLICAD_CORE_METRICS_GAUGE_H_
#define REPLICAD_CORE_METRICS_GAUGE_H_

#include <atomic>

#include "core/metrics/atomic_double.h"

namespace replicad {
namespace metrics {

// A value that goes up and down (queue depth, bytes in use, replicas ready),
// exported as a Prometheus gauge. Starts at 0. Thread-safe and lock-free; get
// one from GaugeFamily::WithLabels and cache the reference.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  // Adds `delta`, which may be negative.
  void Add(double delta) { AtomicAdd(value_, delta); }

  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_GAUGE_H_
