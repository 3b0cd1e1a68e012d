#include "core/metrics/histogram.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/fatal.h"
#include "core/metrics/atomic_double.h"

namespace replicad {
namespace metrics {

std::vector<double> DefaultLatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

absl::Status ValidateBucketBounds(absl::Span<const double> bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram bucket bound ", i, " is ", bounds[i],
                       "; bounds must be finite (the +Inf bucket is implied)"));
    }
    if (i > 0 && !(bounds[i - 1] < bounds[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram bucket bounds must strictly increase; bound ", i, " (", bounds[i],
                       ") follows ", bounds[i - 1]));
    }
  }
  return absl::OkStatus();
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  if (absl::Status status = ValidateBucketBounds(bounds_); !status.ok()) {
    FatalProgrammerError("metrics", status.message());
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // Index of the first bound >= value; bounds_.size() is the +Inf bucket.
  const size_t index = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[index].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative_counts.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts[i] = running;
  }
  // The count is derived from the buckets rather than kept separately so that
  // the +Inf bucket always equals _count, which Prometheus requires.
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

}  // namespace metrics
}  // namespace replicad
