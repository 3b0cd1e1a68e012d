#ifndef REPLICAD_CORE_SERVE_SCHEDULER_H_
#define REPLICAD_CORE_SERVE_SCHEDULER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/base/clock.h"
#include "core/serve/published_servable.h"
#include "core/serve/scheduled_request.h"
#include "core/serve/scheduler_options.h"
#include "core/serve/servable.h"
#include "core/train/trainable.h"

namespace replicad {

// Told what a scheduler does, for metrics. Called on core threads.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  // A batch of `rows` rows fused from `requests` requests was handed to the slots.
  virtual void OnBatch(const std::string& model, int64_t rows, int requests) = 0;
  // A request was answered without running: "queue_full", "queue_bytes",
  // "timeout" (its queue policy), "deadline", "cancelled".
  virtual void OnRefused(const std::string& model, const char* reason) = 0;
  // Requests now waiting in the model's queue.
  virtual void OnPending(const std::string& model, size_t pending) = 0;
  // A slot's estimated speed (rows/s at the slice size it last ran) and its
  // share of a split, after it ran a slice.
  virtual void OnSlotSpeed(const std::string& model, const std::string& slot,
                           const std::string& device, double rows_per_second, double share) = 0;
};

// One model version's scheduler, between the request path and its slots.
// Requests queue by priority (RequestQueue); whenever one of the model's
// slots is free, the first requests in order are fused into a batch
// (SchedulerOptions: up to max_batch_size rows, a preferred size when
// reachable, waiting at most max_queue_delay), and the batch is run whole on
// one slot or split over several, whichever the slots' measured speeds say
// finishes it first (ChooseRoute). Every request gets exactly its own rows
// back. A model with a rank-0 output (or one that does not keep the batch in
// dim 0) fuses nothing: each request runs alone, so its scalar is its own.
//
// A training step (a request with targets) queues like any request (its
// priority, deadline, policy and bounds apply) but is never fused: when it
// reaches the head it waits for the batches already running, then runs on
// the Trainable, on the same devices, with no batch beside it; the requests
// behind it wait. Batches after a step run on the servable training
// published (published_servable.h), which has the same slots, so no answer
// ever mixes weights of two steps.
//
// Thread-safe. It runs a thread of its own, which forms the batches of
// requests that wait; a request that finds the queue empty and a slot free
// starts from Submit's thread (never blocking it: Servable::Run does not).
// `done` callbacks run on the scheduler's thread, the servable's threads
// (slots, plan building) or the training thread, or before Submit returns
// (a request refused at once, or one the servable ran at once).
class Scheduler {
 public:
  struct Environment {
    std::string model;  // For messages and metrics.
    std::shared_ptr<Servable> servable;
    std::shared_ptr<Trainable> trainable;   // Optional.
    SchedulerOptions options;               // Validated.
    SchedulerObserver* observer = nullptr;  // Optional; must outlive the scheduler.
    // Deadlines, queue delays, timeouts and the times reported; must outlive
    // the scheduler.
    const Clock* clock = RealClock();
    // What batches run on once training has changed the weights; null:
    // always `servable`.
    std::shared_ptr<PublishedServable> published;
  };
  explicit Scheduler(Environment environment);
  // Answers what is still queued Unavailable, and returns once the batches
  // running have finished (or at once when called on its own thread).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Builds the plans of the slice sizes SchedulerOptions' warmup names
  // (stopping at a size that takes over `budget_seconds` to run, or that a
  // slot's memory cannot hold) and measures each slot on them, so routing
  // starts from measured speeds and small requests never wait on a plan
  // build. Blocks; call before the model is served. Inputs are
  // zeros; a model with open dims other than the batch is not warmed (OK).
  // Fails as a Run does.
  absl::Status Warm(double budget_seconds = 0.5);

  // Queues `request` (an inference, or a training step when it has
  // targets; a step answers with ScheduleReport::step, or FailedPrecondition
  // when the model has no Trainable); its `done` runs exactly once. Refused at once:
  // Unavailable when its priority level's queue is full, ResourceExhausted
  // when its inputs would pass max_queue_bytes, Unavailable while stopping.
  void Submit(std::unique_ptr<ScheduledRequest> request);

  struct SlotReport {
    std::string slot, device;
    bool measured = false;
    double rows_per_second = 0;                     // At the slice size it last ran.
    double fixed_seconds = 0, seconds_per_row = 0;  // Its speed line.
  };
  std::vector<SlotReport> Slots() const;
  size_t pending() const;
  const SchedulerOptions& options() const;

 private:
  struct Core;
  std::shared_ptr<Core> core_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SCHEDULER_H_
