#ifndef REPLICAD_CORE_SERVE_SCHEDULER_OPTIONS_H_
#define REPLICAD_CORE_SERVE_SCHEDULER_OPTIONS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace replicad {

// How one priority level's queue treats its requests: Triton's
// ModelQueuePolicy, in the core's terms.
struct QueuePolicy {
  // What happens to a request still queued when its policy timeout passes:
  // kReject answers it DEADLINE_EXCEEDED (Triton answers UNAVAILABLE; a
  // timeout is what the client asked for, so replicad says so); kDelay keeps
  // it, behind every request of its level that has not timed out.
  enum class TimeoutAction { kReject, kDelay };
  TimeoutAction timeout_action = TimeoutAction::kReject;
  // Time a request may wait in the queue; zero: no limit but its deadline.
  absl::Duration default_timeout = absl::ZeroDuration();
  // A request's own `timeout` may shorten default_timeout (never lengthen it;
  // with no default it sets the limit).
  bool allow_timeout_override = true;
  // Requests this level holds at most; one more is answered UNAVAILABLE at
  // once. 0: no bound of its own (the scheduler's max_queue_bytes still holds).
  uint32_t max_queue_size = 0;
};

// Rows a fused batch holds at most for a model served without a
// max_batch_size (--max-batch-size 0); a larger request still runs, alone.
inline constexpr int64_t kDefaultFusedBatchRows = 256;

// The longest sequence bucket a model may list: padding a request of one
// token to more would let a configuration turn small requests into
// gigabytes.
inline constexpr int64_t kMaxSequenceBucket = int64_t{1} << 20;

// How a model's scheduler queues, batches and orders requests. Read from a
// Triton config.pbtxt's dynamic_batching, or from the daemon's flags for a
// model without one. The defaults here are those of a model without a
// config.pbtxt; a config.pbtxt means Triton's (no batching without
// dynamic_batching, allow_timeout_override false).
struct SchedulerOptions {
  // Fuse queued requests into one batch (up to max_batch_size rows, taking a
  // preferred size when one is reachable). Off: each request is a batch of
  // its own, still queued, routed and split by the scheduler.
  bool dynamic_batching = true;
  // Rows a formed batch holds at most (0: no bound but one request's rows;
  // a request larger than this runs alone). The model's max_batch_size.
  int64_t max_batch_size = 0;
  // Batch sizes that run well, ascending; a batch stops at the largest one
  // it can reach.
  std::vector<int64_t> preferred_batch_sizes;
  // How long the oldest queued request may wait for a batch to fill while a
  // slot is free. Zero: a free slot takes what is queued at once.
  absl::Duration max_queue_delay = absl::ZeroDuration();
  // Answers leave in the order their requests arrived.
  bool preserve_ordering = false;
  // Levels 1 (first) .. priority_levels; 0 levels: one queue. A request's
  // priority 0, or above priority_levels, means default_priority_level.
  uint32_t priority_levels = 0;
  uint32_t default_priority_level = 0;
  QueuePolicy default_queue_policy;
  std::map<uint32_t, QueuePolicy> priority_queue_policy;  // By level.
  // Split batches across slots in proportion to each slot's measured speed
  // for this model (--slot-weights auto); false: by the slots' configured
  // weights (SlotStatus::weight).
  bool measured_weights = true;
  // Bytes of request inputs queued or running at most (0: no bound); a
  // request that would pass it is answered RESOURCE_EXHAUSTED at once.
  uint64_t max_queue_bytes = uint64_t{1} << 30;
  // The slice sizes Scheduler::Warm builds and measures before the model is
  // served: 1, 2 and the powers of two up to warmup_max_rows, the preferred
  // sizes and warmup_batch_sizes (a config.pbtxt's model_warmup), none above
  // max_batch_size. Every other size builds its plan on first use: warming
  // each power of two up to max_batch_size on every slot cost minutes and
  // gigabytes per repository before any port opened.
  int64_t warmup_max_rows = 2;
  std::vector<int64_t> warmup_batch_sizes;
  // Sequence lengths, ascending, that a request's open dim 1 is padded to
  // (sequence_buckets.h): requests of lengths 37 and 50 then share the plan
  // and the batch of length 64. Empty: every length is a shape of its own.
  // At most kMaxSequenceBucket.
  std::vector<int64_t> sequence_buckets;

  // The policy of `level` (1-based; the default policy for levels without one).
  const QueuePolicy& PolicyOf(uint32_t level) const;
  // The level a request with `priority` queues at.
  uint32_t LevelOf(uint64_t priority) const;
  // InvalidArgument naming the field (Triton's names, e.g.
  // "dynamic_batching.default_priority_level") and the values: a preferred
  // size <= 0 or above max_batch_size, a default level outside
  // 1..priority_levels while levels are set, a policy for a level that does
  // not exist, a negative delay or timeout, warmup sizes below 1 (a
  // warmup batch size above max_batch_size too), sequence buckets that are
  // not positive and ascending.
  absl::Status Validate() const;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SCHEDULER_OPTIONS_H_
