#include "core/serve/model_statistics.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace replicad {

void DurationStat::Add(absl::Duration d) {
  ++count;
  ns += static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d)));
}

void ModelStatistics::RecordSuccess(int64_t rows, const RequestTimes& times) {
  absl::MutexLock lock(&mu_);
  stats_.last_inference_ms = absl::ToUnixMillis(absl::Now());
  stats_.inference_count += static_cast<uint64_t>(rows);
  stats_.success.Add(times.total());
  stats_.queue.Add(times.queue);
  stats_.compute_input.Add(times.compute_input);
  stats_.compute_infer.Add(times.compute_infer);
  stats_.compute_output.Add(times.compute_output);
}

void ModelStatistics::RecordExecution(int64_t batch_size, const RequestTimes& times) {
  absl::MutexLock lock(&mu_);
  ++stats_.execution_count;
  auto it = stats_.batches.find(batch_size);
  if (it == stats_.batches.end()) {
    if (stats_.batches.size() >= kMaxBatchSizes) return;
    it = stats_.batches.emplace(batch_size, ModelStatisticsSnapshot::Batch{}).first;
  }
  it->second.compute_input.Add(times.compute_input);
  it->second.compute_infer.Add(times.compute_infer);
  it->second.compute_output.Add(times.compute_output);
}

void ModelStatistics::RecordFailure(absl::Duration total) {
  absl::MutexLock lock(&mu_);
  stats_.last_inference_ms = absl::ToUnixMillis(absl::Now());
  stats_.fail.Add(total);
}

ModelStatisticsSnapshot ModelStatistics::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace replicad
