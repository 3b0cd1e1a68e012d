#ifndef REPLICAD_CORE_SERVE_SCHEDULED_REQUEST_H_
#define REPLICAD_CORE_SERVE_SCHEDULED_REQUEST_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/device/batch_split.h"
#include "core/serve/request_context.h"
#include "core/serve/servable.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/trainable.h"

namespace replicad {

// How a scheduled request ran, for its answer and statistics.
struct ScheduleReport {
  const Servable* servable = nullptr;  // What ran it; null when it never ran.
  std::vector<BatchSlice> slices;      // The batch's slices (rows of the batch).
  int64_t batch_rows = 0;              // Rows of the batch it ran in.
  int64_t first_row = 0;               // Where its rows begin in that batch.
  int batch_requests = 0;              // Requests fused into that batch.
  absl::Duration queue;                // Queued -> its batch handed to the slots.
  absl::Duration gather;               // Copying its rows into the fused batch.
  absl::Duration infer;                // The slots' run.
  absl::Duration scatter;              // Copying its rows out of the fused batch.
  // A training step's result (set when one ran and succeeded); its `infer`
  // is the step's time on the training side.
  std::optional<DataParallelTrainer::StepResult> step;
};

// One inference request or training step between its admission and its
// answer, as the scheduler and its queue see it.
struct ScheduledRequest {
  using Done = absl::AnyInvocable<void(absl::Status status, ScheduleReport report) &&>;

  // Given by the caller. `inputs`: model order, bound and validated, the same
  // dim 0 > 0, viewing bytes that stay valid until `done` has returned.
  std::vector<Tensor> inputs;
  RequestContext context;
  OutputSink* sink = nullptr;  // Its outputs, with its own rows; valid until `done`.
  // Set for a training step (then `sink` is unused): its targets, validated,
  // with the inputs' dim 0, valid until `done` has returned. A step is never
  // fused with other requests; it runs on the model's Trainable once every
  // batch queued before it has finished, and no batch starts while it runs.
  std::optional<Tensor> targets;
  std::optional<TrainShard> shard;  // A step that is one rank's shard of the job's.
  Done done;

  // Set by the scheduler when the request is queued.
  uint64_t sequence = 0;  // Arrival order among accepted requests.
  uint32_t level = 1;     // Priority level, 1 first.
  absl::Time enqueued;
  absl::Time timeout_at = absl::InfiniteFuture();  // Its queue policy's limit.
  bool delayed = false;                            // Timed out under a DELAY policy.
  // Nothing was queued or running when it came: a model without concurrent
  // load, whose batch may borrow the idle slots' cores (Scheduler).
  bool arrived_idle = false;
  uint64_t bytes = 0;  // Of its inputs (and targets).

  int64_t rows() const { return inputs.empty() ? 0 : inputs[0].shape()[0]; }
  bool is_step() const { return targets.has_value(); }
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SCHEDULED_REQUEST_H_
