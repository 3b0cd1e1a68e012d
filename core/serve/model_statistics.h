#ifndef REPLICAD_CORE_SERVE_MODEL_STATISTICS_H_
#define REPLICAD_CORE_SERVE_MODEL_STATISTICS_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace replicad {

// A count and the time those events took in all, in nanoseconds.
struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
  void Add(absl::Duration d);
};

// Where a request's time went, as the serving core measured it:
//   queue          admitted -> handed to the replicas
//   compute_input  checking the request and binding its tensors
//   compute_infer  the replicas' run (copies to and from devices included;
//                  outputs are written straight into the response)
//   compute_output the replicas' completion -> the protocol's answer
struct RequestTimes {
  absl::Duration queue, compute_input, compute_infer, compute_output;
  absl::Duration total() const { return queue + compute_input + compute_infer + compute_output; }
};

// One model version's inference statistics, in the shape of Triton's
// ModelStatistics: per-phase durations of successful requests, failures,
// and per batch size the phases of each execution.
struct ModelStatisticsSnapshot {
  int64_t last_inference_ms = 0;  // Unix time of the last request, ms; 0: none yet.
  uint64_t inference_count = 0;   // Samples (batch rows) inferred.
  uint64_t execution_count = 0;   // Runs of the model.
  DurationStat success, fail, queue, compute_input, compute_infer, compute_output;
  struct Batch {
    DurationStat compute_input, compute_infer, compute_output;
  };
  std::map<int64_t, Batch> batches;  // By batch size.
};

// Thread-safe accumulator of ModelStatisticsSnapshot.
class ModelStatistics {
 public:
  // At most this many distinct batch sizes get a row of their own; requests
  // of other sizes still count in every total.
  static constexpr size_t kMaxBatchSizes = 4096;

  // A request of `rows` rows answered; its times count in the totals.
  void RecordSuccess(int64_t rows, const RequestTimes& times);
  // One run of the model on a batch of `batch_size` rows (fused from one or
  // more requests), with the times of the request that reports it.
  void RecordExecution(int64_t batch_size, const RequestTimes& times);
  void RecordFailure(absl::Duration total);
  ModelStatisticsSnapshot Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  ModelStatisticsSnapshot stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_MODEL_STATISTICS_H_
