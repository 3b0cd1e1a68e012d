#ifndef REPLICAD_CORE_METRICS_HISTOGRAM_H_
#define REPLICAD_CORE_METRICS_HISTOGRAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace replicad {
namespace metrics {

// Bucket upper bounds in seconds for request and step latencies, 0.5 ms to
// 10 s: fine below 10 ms where a small-batch Predict lands, coarse above 1 s
// where only training steps and overloaded queues go.
std::vector<double> DefaultLatencyBuckets();

// OK when `bounds` are finite and strictly increasing (an empty list is valid:
// only the implied +Inf bucket remains); InvalidArgument naming the offending
// bound otherwise.
absl::Status ValidateBucketBounds(absl::Span<const double> bounds);

// The distribution of observed values, exported as a Prometheus histogram:
// cumulative buckets (`le` = upper bound, the last one +Inf), _sum and _count.
// Unlike a summary it aggregates across replicas and processes. Thread-safe;
// Observe is lock-free. Get one from HistogramFamily::WithLabels.
class Histogram {
 public:
  // `bounds` must pass ValidateBucketBounds; anything else is a programmer
  // error and aborts.
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Records `value` (e.g. seconds) in the first bucket with value <= bound.
  // A NaN is dropped: it would turn _sum into NaN for the life of the process.
  void Observe(double value);

  struct Snapshot {
    // cumulative_counts[i]: observations <= bounds()[i]; the last entry (one
    // past the bounds) is the +Inf bucket and equals `count`.
    std::vector<uint64_t> cumulative_counts;
    double sum = 0.0;
    uint64_t count = 0;
  };
  // The buckets and count are mutually consistent even while other threads
  // observe; `sum` may include or miss an observation in flight.
  Snapshot Read() const;

  // The finite upper bounds, without the implied +Inf.
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  // Per-bucket (not cumulative) counts, bounds_.size() + 1 of them, so that an
  // observation touches exactly one bucket.
  const std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0.0};
};

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_HISTOGRAM_H_
