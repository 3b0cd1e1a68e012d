#include "core/serve/scheduler.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/serve/request_queue.h"
#include "core/serve/slot_routing.h"

namespace replicad {
namespace {

// How often the queue is searched for cancelled requests while it holds some:
// cancellation is only seen by asking each request.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(2);

// A slot left out of every batch for this long is measured again: routing
// treats its speed as unknown, so the next batch gives it a share by its
// configured weight. Otherwise one bad measurement (a slot that was slow
// for a moment) would keep it out for good.
constexpr absl::Duration kRemeasureAfter = absl::Seconds(1);

// Batches a slot may hold (running and waiting on its stream) before it
// counts as busy, when requests are not fused: a second one waiting means
// the slot starts it the moment the first ends, instead of idling while the
// scheduler's thread wakes. When they are fused, one: requests that wait in
// the queue instead join the next batch (measured on the default model at
// concurrency 16: 2 would cut rows per batch from 5.7 to 3.0 and throughput
// by 3%, while unfused throughput gains 3-5%).
constexpr int kUnfusedSlotDepth = 2;

// A slot whose plans for a slice did not fit its memory takes slices of at
// most half those rows from then on (the largest size warm-up fitted, when
// it learned it); after this long it is offered its full share again, since
// other models may have freed memory meanwhile.
constexpr absl::Duration kMemoryCapFor = absl::Seconds(30);

// Whether `a` and `b` can be rows of one batch: the same dtypes and the same
// dims after dim 0.
bool Fusable(const ScheduledRequest& a, const ScheduledRequest& b) {
  if (a.is_step() || b.is_step() || a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const Tensor& x = a.inputs[i];
    const Tensor& y = b.inputs[i];
    if (x.dtype() != y.dtype() || x.shape().size() != y.shape().size()) return false;
    if (!std::equal(x.shape().begin() + 1, x.shape().end(), y.shape().begin() + 1)) return false;
  }
  return true;
}

// OK while any of a batch's requests still wants it; otherwise the first
// one's reason. One unwanted request must not stop the others' rows.
absl::Status AnyStillWanted(const std::vector<std::unique_ptr<ScheduledRequest>>& requests,
                            absl::Time now) {
  absl::Status first;
  for (const std::unique_ptr<ScheduledRequest>& request : requests) {
    absl::Status wanted = request->context.StillWanted("after its batch was dispatched", now);
    if (wanted.ok()) return wanted;
    if (first.ok()) first = std::move(wanted);
  }
  return first;
}

size_t RowBytes(const TensorType& type) {
  return type.shape.empty() || type.shape[0] == 0
             ? 0
             : ByteSize(type) / static_cast<size_t>(type.shape[0]);
}

// The outputs of a fused batch, in host memory, before each request's rows
// are copied out to it.
class BatchOutputs : public OutputSink {
 public:
  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override {
    if (static_cast<size_t>(index) >= outputs.size()) outputs.resize(index + 1);
    outputs[index] = Tensor::Host(type.dtype, type.shape);
    return outputs[index].raw_data();
  }
  std::vector<Tensor> outputs;
};

// A request's own sink, asked once per output however often its batch runs:
// a batch run again after a slot failed mid-way writes the same memory (a
// protocol's response must not grow a second copy of an output).
class AllocateOnce : public OutputSink {
 public:
  explicit AllocateOnce(OutputSink* sink) : sink_(sink) {}
  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override {
    if (static_cast<size_t>(index) >= given_.size()) given_.resize(index + 1);
    if (given_[index] && given_[index]->first == type) return given_[index]->second;
    absl::StatusOr<void*> memory = sink_->Allocate(index, type);
    if (memory.ok()) given_[index] = std::make_pair(type, *memory);
    return memory;
  }

 private:
  OutputSink* sink_;
  std::vector<std::optional<std::pair<TensorType, void*>>> given_;
};

}  // namespace

// Everything the scheduler's thread and the slots' callbacks share; they
// hold it by shared_ptr so that it outlives whichever of them ends last.
struct Scheduler::Core {
  explicit Core(Environment environment)
      : env(std::move(environment)), slot_status(env.servable->Slots()), queue(env.options) {
    slots.resize(slot_status.size());
    for (size_t s = 0; s < slots.size(); ++s) slots[s].healthy = slot_status[s].health.ok();
    // The model's outputs say whether requests can share a batch: a rank-0
    // output (a mean, a loss) must be computed over one request's rows.
    for (const TensorSpec& output : env.servable->model().outputs()) {
      if (output.type.shape.empty()) fuse = false;
    }
    // Nor can requests of a model whose rows mix (row_mixing.h), which also
    // runs each batch whole on one slot.
    mixes_rows = !env.servable->model().row_mixing().empty();
    if (mixes_rows) fuse = false;
  }

  struct SlotState {
    int outstanding = 0;    // Batches given to it and not yet finished.
    absl::Time busy_until;  // Estimated end of that work.
    SlotSpeed speed;
    double share = 1;                            // Of the last split it was in.
    absl::Time last_ran = absl::InfinitePast();  // When a slice of it last ended.
    bool healthy = true;  // As the servable said when the last batch was routed.
    // Its device failed for good under a batch (seen on whichever servable
    // ran it: a trained model's predict set has devices of its own).
    bool lost = false;
    int64_t last_rows = 1;         // Of the last slice it ran.
    int64_t max_rows = INT64_MAX;  // Largest slice known to fit its memory.
    absl::Time capped_at;          // When max_rows was learned.
  };

  // One batch on its way through the slots.
  struct Batch {
    std::vector<std::unique_ptr<ScheduledRequest>> requests;
    std::vector<BatchSlice> slices;
    int64_t rows = 0;
    uint64_t bytes = 0;
    absl::Time dispatched;
    absl::Duration gather;
    std::unique_ptr<BatchOutputs> fused;  // Null for one request.
    std::unique_ptr<AllocateOnce> sink;   // One request's, made on its first run.
    // Run again after a slot's memory could not hold its slice, or after a
    // slot failed for good.
    bool rerouted = false;
  };

  class BatchInFlight;

  void Loop();
  // Forms the next batch and starts it (refusing the requests in it no
  // longer wanted): true when it took requests out of the queue; otherwise
  // `*ready_at` says when a batch will be ready without new arrivals.
  bool StartNextBatch(absl::Time now, absl::Time* ready_at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // On Submit: when the new request is alone in the queue, a slot is free
  // and its batch need not wait for others, starts it on the submitting
  // thread. The loop's thread would only wake to do the same, and each
  // hand-off between threads costs the request a wake-up (at concurrency 1
  // on a one-Relu model, queue time was 49-54 of the server's 114-130 us a
  // request; 5 of 61 after).
  bool StartOnArrival(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // On Submit, when `queued` did not start at once: whether the loop,
  // asleep, has something to do that it would not wake for by itself (a
  // slot is free, or `queued` needs a look before the loop's own time).
  // While every slot is busy, the slot that frees first wakes it (Finished);
  // waking it on each arrival as well, its thread switched 0.57 times a
  // request at concurrency 64 with batching on.
  bool LoopMustWake(const ScheduledRequest& queued, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Takes the next batch out of the queue into `batch` when one is ready;
  // otherwise sets `*ready_at` to when one will be (without new arrivals).
  bool FormBatch(absl::Time now, Batch* batch, absl::Time* ready_at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool AnySlotFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Also refreshes each slot's health, which AnySlotFree reads.
  // With `may_lend`, a batch on one slot may be marked to borrow the others'
  // cores (Servable::LendsIdleCores), see its definition.
  Route RouteOf(int64_t rows, absl::Time now, bool may_lend = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Gives `batch` the slices of `route`, counted as its slots' work.
  void Assign(Batch& batch, Route route, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Takes `batch`'s slices off its slots' work.
  void Release(const Batch& batch, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // When the batch failed because a slot's memory could not hold its slice's
  // plans: halves that slot's largest slice (unless the slice was over it
  // already) and, when the slots can hold the batch within their caps,
  // routes it again (true: dispatched again, it finishes later). A new route
  // fails only within a cap, which then halves: the retries end. When it
  // failed on a slot whose device then reported itself failed for good: runs
  // it again on the healthy slots (each retry loses a slot for good, so they
  // end too).
  bool Reroute(const std::shared_ptr<Batch>& batch, const absl::Status& status,
               const std::vector<BatchSlice>& slices, const Servable& ran_on);
  // Reroute's two cases: the new route, or none when the batch is not to run again.
  std::optional<Route> RouteWithinMemoryCaps(int64_t rows, const std::vector<BatchSlice>& slices,
                                             absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::optional<Route> RouteAroundLostSlots(int64_t rows, const std::vector<BatchSlice>& slices,
                                            const Servable& ran_on, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Counts `batch` as running and hands it to its slots (a step to the
  // trainable), with mu released meanwhile.
  void Start(std::shared_ptr<Batch> batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Dispatch(std::shared_ptr<Batch> batch);
  // Runs a training step (the batch's one request) on the trainable.
  void RunStep(std::shared_ptr<Batch> batch);
  void StepFinished(std::shared_ptr<Batch> batch,
                    absl::StatusOr<DataParallelTrainer::StepResult> result);
  void Finished(std::shared_ptr<Batch> batch, absl::Status status, std::vector<BatchSlice> slices,
                const Servable* servable);
  // Answers `request`, in arrival order when the options ask for it.
  void Answer(std::unique_ptr<ScheduledRequest> request, absl::Status status,
              ScheduleReport report);
  void Refuse(std::unique_ptr<ScheduledRequest> request, absl::Status status, const char* reason);
  // Refuses requests taken out of the queue (their bytes leave the flight),
  // with mu released meanwhile.
  void RefuseUnwanted(std::vector<RequestQueue::Expired> unwanted, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Moves the requests of `batch` that are no longer wanted out of it.
  static std::vector<RequestQueue::Expired> TakeUnwanted(Batch& batch, absl::Time now);

  // The queue's length, numbered in the order of its changes (taken under mu).
  struct PendingCount {
    uint64_t change = 0;
    size_t pending = 0;
  };
  PendingCount CountPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return {++pending_changes, queue.size()};
  }
  // Tells the observer `count` unless a later count was told already: counts
  // are told outside mu, so two threads' counts can arrive out of order, and
  // the gauge must end at the queue's length, not at an older one.
  void ReportPending(PendingCount count) ABSL_LOCKS_EXCLUDED(mu, report_mu) {
    if (env.observer == nullptr) return;
    absl::MutexLock lock(&report_mu);
    if (count.change <= reported_change) return;
    reported_change = count.change;
    env.observer->OnPending(env.model, count.pending);
  }

  const Environment env;
  const std::vector<SlotStatus> slot_status;  // Names and devices, by slot.
  mutable absl::Mutex mu;
  // Whether requests may share a batch (Warm may learn not).
  bool fuse ABSL_GUARDED_BY(mu) = true;
  bool mixes_rows = false;  // Set once, before the scheduler runs.
  absl::CondVar wake;
  RequestQueue queue ABSL_GUARDED_BY(mu);
  std::vector<SlotState> slots ABSL_GUARDED_BY(mu);
  uint64_t bytes_in_flight ABSL_GUARDED_BY(mu) = 0;
  int running ABSL_GUARDED_BY(mu) = 0;  // Batches and steps handed out, not finished.
  // A training step is running: it has every slot's devices, so no batch starts.
  bool training ABSL_GUARDED_BY(mu) = false;
  // Batches' callbacks not yet destroyed (BatchInFlight); the destructor
  // waits for them, so no slot thread ever holds the last reference to a
  // servable or to this.
  int callbacks ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_sequence ABSL_GUARDED_BY(mu) = 0;
  uint64_t pending_changes ABSL_GUARDED_BY(mu) = 0;
  absl::Mutex report_mu;  // After mu, never held with it.
  uint64_t reported_change ABSL_GUARDED_BY(report_mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  // While the loop sleeps, when it wakes by itself; InfinitePast while it runs.
  absl::Time loop_waits_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  absl::Time next_cancel_poll ABSL_GUARDED_BY(mu) = absl::InfinitePast();

  // preserve_ordering: answers held until those of earlier requests left.
  struct Held {
    std::unique_ptr<ScheduledRequest> request;
    absl::Status status;
    ScheduleReport report;
  };
  absl::Mutex order_mu;
  std::map<uint64_t, Held> held ABSL_GUARDED_BY(order_mu);
  uint64_t next_answer ABSL_GUARDED_BY(order_mu) = 0;
  bool answering ABSL_GUARDED_BY(order_mu) = false;

  std::thread thread;
};

// What a batch's callbacks hold while its slots run it: the batch, the
// servable running it, and a count in the core that the scheduler's
// destructor waits on. The servable and batch are released before the count
// drops, so the last references to them are never dropped on a slot thread
// (a replica set cannot be destroyed on its own slot thread).
class Scheduler::Core::BatchInFlight {
 public:
  BatchInFlight(Scheduler::Core* core, std::shared_ptr<Scheduler::Core::Batch> batch);
  BatchInFlight(BatchInFlight&& other) noexcept
      : core_(std::exchange(other.core_, nullptr)),
        batch_(std::move(other.batch_)),
        servable_(std::move(other.servable_)) {}
  BatchInFlight& operator=(BatchInFlight&&) = delete;
  ~BatchInFlight();

  Scheduler::Core* core() const { return core_; }
  const std::shared_ptr<Scheduler::Core::Batch>& batch() const { return batch_; }
  void Hold(std::shared_ptr<Servable> servable) { servable_ = std::move(servable); }
  Servable& servable() const { return *servable_; }

 private:
  Scheduler::Core* core_;
  std::shared_ptr<Scheduler::Core::Batch> batch_;
  std::shared_ptr<Servable> servable_;
};

Scheduler::Core::BatchInFlight::BatchInFlight(Scheduler::Core* core,
                                              std::shared_ptr<Scheduler::Core::Batch> batch)
    : core_(core), batch_(std::move(batch)) {
  absl::MutexLock lock(&core_->mu);
  ++core_->callbacks;
}

Scheduler::Core::BatchInFlight::~BatchInFlight() {
  if (core_ == nullptr) return;
  batch_.reset();
  servable_.reset();
  absl::MutexLock lock(&core_->mu);
  --core_->callbacks;
}

void Scheduler::Core::Answer(std::unique_ptr<ScheduledRequest> request, absl::Status status,
                             ScheduleReport report) {
  if (!env.options.preserve_ordering) {
    std::move(request->done)(std::move(status), std::move(report));
    return;
  }
  absl::MutexLock lock(&order_mu);
  const uint64_t sequence = request->sequence;
  held.emplace(sequence, Held{std::move(request), std::move(status), std::move(report)});
  // One thread answers at a time, so answers leave in order even when
  // batches finish on different slots at once.
  if (answering) return;
  answering = true;
  while (!held.empty() && held.begin()->first == next_answer) {
    Held next = std::move(held.begin()->second);
    held.erase(held.begin());
    ++next_answer;
    order_mu.Unlock();
    std::move(next.request->done)(std::move(next.status), std::move(next.report));
    order_mu.Lock();
  }
  answering = false;
}

void Scheduler::Core::Refuse(std::unique_ptr<ScheduledRequest> request, absl::Status status,
                             const char* reason) {
  if (env.observer != nullptr) env.observer->OnRefused(env.model, reason);
  Answer(std::move(request), std::move(status), ScheduleReport{});
}

bool Scheduler::Core::AnySlotFree() const {
  if (training) return false;
  const int depth = fuse && env.options.dynamic_batching ? 1 : kUnfusedSlotDepth;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].outstanding < depth && slots[s].healthy) return true;
  }
  return false;
}

Route Scheduler::Core::RouteOf(int64_t rows, absl::Time now, bool may_lend) {
  std::vector<SlotLoad> loads(slots.size());
  const std::vector<SlotStatus> status = env.servable->Slots();  // Health changes.
  for (size_t s = 0; s < slots.size(); ++s) {
    slots[s].healthy = s < status.size() && status[s].health.ok() && !slots[s].lost;
    loads[s].healthy = slots[s].healthy;
    loads[s].weight = s < status.size() ? status[s].weight : 1.0;
    const bool stale = slots[s].outstanding == 0 && now - slots[s].last_ran > kRemeasureAfter &&
                       slots[s].last_ran != absl::InfinitePast();
    loads[s].speed = stale ? nullptr : &slots[s].speed;
    if (slots[s].max_rows != INT64_MAX && now - slots[s].capped_at > kMemoryCapFor) {
      slots[s].max_rows = INT64_MAX;
    }
    loads[s].max_rows = slots[s].max_rows;
    if (slots[s].outstanding > 0) {
      // Busy past its estimate: it is about to finish, but not free.
      loads[s].busy_seconds = std::max(absl::ToDoubleSeconds(slots[s].busy_until - now), 1e-6);
    }
  }
  // With requests waiting, one slot stays out of this batch for them.
  const size_t max_slots = mixes_rows      ? 1
                           : queue.empty() ? SIZE_MAX
                                           : std::max<size_t>(1, slots.size() - 1);
  Route route = ChooseRoute(rows, loads, env.options.measured_weights, max_slots);
  // A batch on one slot, with nothing queued behind it and every other slot
  // idle, may borrow their cores (Servable::LendsIdleCores); Assign holds
  // them for it, so that requests arriving meanwhile queue and fuse instead
  // of waiting, one by one, on a slot whose cores are lent. Only when its
  // requests found the model idle (`may_lend`): under concurrent load, a
  // row on two threads (about 1.6 times as fast on this project's CPUs)
  // would serve fewer rows a second than two rows on one thread each (at
  // 2 clients in a closed loop, lending every batch lost 20% of bert's
  // throughput; benchmarks/RESULTS.md).
  if (may_lend && route.slices.size() == 1 && queue.empty() && env.servable->LendsIdleCores()) {
    bool others_idle = true;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (static_cast<int>(s) != route.slices[0].slot && slots[s].outstanding > 0) {
        others_idle = false;
      }
    }
    route.slices[0].widened = others_idle;
  }
  return route;
}

bool Scheduler::Core::FormBatch(absl::Time now, Batch* batch, absl::Time* ready_at) {
  const SchedulerOptions& o = env.options;
  const ScheduledRequest* head = nullptr;
  int count = 0, preferred_count = 0;
  int64_t rows = 0;
  bool full = false;
  absl::Time oldest = absl::InfiniteFuture();
  queue.Visit([&](const ScheduledRequest& r) {
    if (head == nullptr) {
      head = &r;
    } else if (!fuse || !o.dynamic_batching || !Fusable(*head, r)) {
      full = true;
      return false;
    }
    const int64_t max_rows = o.max_batch_size > 0 ? o.max_batch_size : head->rows();
    if (count > 0 && rows + r.rows() > max_rows) {
      full = true;
      return false;
    }
    rows += r.rows();
    ++count;
    oldest = std::min(oldest, r.enqueued);
    if (std::find(o.preferred_batch_sizes.begin(), o.preferred_batch_sizes.end(), rows) !=
        o.preferred_batch_sizes.end()) {
      preferred_count = count;
    }
    if (rows >= max_rows) {
      full = true;
      return false;
    }
    return true;
  });
  if (count == 0) return false;
  int take = count;
  if (!full && preferred_count > 0) {
    take = preferred_count;
  } else if (!full && now < oldest + o.max_queue_delay) {
    *ready_at = oldest + o.max_queue_delay;
    return false;
  }
  for (int i = 0; i < take; ++i) {
    std::unique_ptr<ScheduledRequest> request = queue.Pop();
    batch->rows += request->rows();
    batch->bytes += request->bytes;
    batch->requests.push_back(std::move(request));
  }
  return true;
}

void Scheduler::Core::RefuseUnwanted(std::vector<RequestQueue::Expired> unwanted, absl::Time now) {
  for (auto& [request, status] : unwanted) bytes_in_flight -= request->bytes;
  const PendingCount pending = CountPending();
  mu.Unlock();
  for (auto& [request, status] : unwanted) {
    const char* reason = status.code() == absl::StatusCode::kCancelled     ? "cancelled"
                         : status.code() == absl::StatusCode::kUnavailable ? "stopping"
                         : now >= request->context.deadline                ? "deadline"
                                                                           : "timeout";
    Refuse(std::move(request), std::move(status), reason);
  }
  ReportPending(pending);
  mu.Lock();
}

std::vector<RequestQueue::Expired> Scheduler::Core::TakeUnwanted(Batch& batch, absl::Time now) {
  std::vector<RequestQueue::Expired> unwanted;
  std::vector<std::unique_ptr<ScheduledRequest>> wanted;
  for (std::unique_ptr<ScheduledRequest>& request : batch.requests) {
    absl::Status status = request->context.StillWanted("while queued", now);
    if (status.ok()) {
      wanted.push_back(std::move(request));
      continue;
    }
    batch.rows -= request->rows();
    batch.bytes -= request->bytes;
    unwanted.emplace_back(std::move(request), std::move(status));
  }
  batch.requests = std::move(wanted);
  return unwanted;
}

void Scheduler::Core::Loop() {
  absl::MutexLock lock(&mu);
  while (true) {
    absl::Time now = env.clock->Now();
    if (!queue.empty() && (now >= next_cancel_poll || now >= queue.NextExpiry())) {
      std::vector<RequestQueue::Expired> expired = queue.Expire(now);
      next_cancel_poll = now + kCancelPoll;
      if (!expired.empty()) {
        RefuseUnwanted(std::move(expired), now);
        continue;
      }
    }
    if (stopping && queue.empty() && running == 0) return;
    absl::Time wake_at =
        queue.empty() ? absl::InfiniteFuture() : std::min(queue.NextExpiry(), next_cancel_poll);
    const ScheduledRequest* head = queue.Front();
    if (head != nullptr && head->is_step()) {
      // A step waits for every batch before it to finish (Finished wakes
      // this loop), then has the devices to itself; requests behind it wait.
      if (running == 0) {
        auto batch = std::make_shared<Batch>();
        batch->requests.push_back(queue.Pop());
        batch->rows = batch->requests[0]->rows();
        batch->bytes = batch->requests[0]->bytes;
        training = true;
        Start(std::move(batch));
        continue;
      }
    } else if (head != nullptr && AnySlotFree()) {
      absl::Time ready_at = absl::InfiniteFuture();
      if (StartNextBatch(now, &ready_at)) continue;
      wake_at = std::min(wake_at, ready_at);
    }
    loop_waits_until = wake_at;
    env.clock->WaitWithDeadline(wake, mu, wake_at);
    loop_waits_until = absl::InfinitePast();
  }
}

bool Scheduler::Core::LoopMustWake(const ScheduledRequest& queued, absl::Time now) const {
  if (running == 0 || AnySlotFree()) return true;
  absl::Time expiry = std::min(queued.context.deadline, now + kCancelPoll);
  if (!queued.delayed) expiry = std::min(expiry, queued.timeout_at);
  return expiry < loop_waits_until;
}

bool Scheduler::Core::StartNextBatch(absl::Time now, absl::Time* ready_at) {
  auto batch = std::make_shared<Batch>();
  if (!FormBatch(now, batch.get(), ready_at)) return false;
  // The queue is polled every kCancelPoll; a slot freed in between (a batch
  // stopped at shutdown, say) must not start requests whose client or
  // server gave up since.
  std::vector<RequestQueue::Expired> unwanted = TakeUnwanted(*batch, now);
  if (!unwanted.empty()) RefuseUnwanted(std::move(unwanted), now);
  if (batch->requests.empty()) return true;
  bool arrived_idle = true;
  for (const auto& request : batch->requests) arrived_idle = arrived_idle && request->arrived_idle;
  Assign(*batch, RouteOf(batch->rows, now, arrived_idle), now);
  Start(std::move(batch));
  return true;
}

bool Scheduler::Core::StartOnArrival(absl::Time now) {
  if (queue.size() != 1 || stopping) return false;
  const ScheduledRequest* head = queue.Front();
  if (head->is_step() || !AnySlotFree()) return false;
  absl::Time ready_at;
  return StartNextBatch(now, &ready_at);
}

void Scheduler::Core::Start(std::shared_ptr<Batch> batch) {
  ++running;
  const PendingCount pending = CountPending();
  const bool step = batch->requests[0]->is_step();
  mu.Unlock();
  ReportPending(pending);
  if (step) {
    RunStep(std::move(batch));
  } else {
    Dispatch(std::move(batch));
  }
  mu.Lock();
}

void Scheduler::Core::Assign(Batch& batch, Route route, absl::Time now) {
  for (const BatchSlice& slice : route.slices) {
    SlotState& slot = slots[slice.slot];
    slot.busy_until =
        std::max(slot.busy_until, now) + absl::Seconds(slot.speed.Seconds(slice.rows()));
    ++slot.outstanding;
    slot.share = static_cast<double>(slice.rows()) / static_cast<double>(batch.rows);
    // A widened slice holds every slot until it ends (RouteOf).
    for (size_t s = 0; slice.widened && s < slots.size(); ++s) {
      if (static_cast<int>(s) == slice.slot) continue;
      slots[s].busy_until = slot.busy_until;
      ++slots[s].outstanding;
    }
  }
  batch.slices = std::move(route.slices);
}

void Scheduler::Core::Release(const Batch& batch, absl::Time now) {
  for (const BatchSlice& slice : batch.slices) {
    for (size_t s = 0; s < slots.size(); ++s) {
      if (static_cast<int>(s) != slice.slot && !slice.widened) continue;
      if (--slots[s].outstanding == 0) slots[s].busy_until = now;
    }
  }
}

bool Scheduler::Core::Reroute(const std::shared_ptr<Batch>& batch, const absl::Status& status,
                              const std::vector<BatchSlice>& slices, const Servable& ran_on) {
  if (status.ok()) return false;
  {
    absl::MutexLock lock(&mu);
    const absl::Time now = env.clock->Now();
    std::optional<Route> route = absl::IsResourceExhausted(status)
                                     ? RouteWithinMemoryCaps(batch->rows, slices, now)
                                     : RouteAroundLostSlots(batch->rows, slices, ran_on, now);
    if (!route || route->slices.empty()) return false;
    Release(*batch, now);
    Assign(*batch, *std::move(route), now);
    batch->rerouted = true;
  }
  Dispatch(batch);
  return true;
}

std::optional<Route> Scheduler::Core::RouteWithinMemoryCaps(int64_t rows,
                                                            const std::vector<BatchSlice>& slices,
                                                            absl::Time now) {
  bool found = false;
  for (const BatchSlice& slice : slices) {
    if (!slice.out_of_memory) continue;
    found = true;
    SlotState& slot = slots[slice.slot];
    // A slice over the cap was routed before the cap was learned: the cap
    // stands. One within it shows the cap is too high.
    if (slice.rows() <= slot.max_rows) {
      slot.max_rows = slice.rows() / 2;
      slot.capped_at = now;
    }
  }
  if (!found) return std::nullopt;
  Route route = RouteOf(rows, now);
  // Only a route within every cap runs again, so each failure of a new
  // route halves a cap and the retries end.
  for (const BatchSlice& slice : route.slices) {
    if (slice.rows() > slots[slice.slot].max_rows) return std::nullopt;
  }
  return route;
}

std::optional<Route> Scheduler::Core::RouteAroundLostSlots(int64_t rows,
                                                           const std::vector<BatchSlice>& slices,
                                                           const Servable& ran_on, absl::Time now) {
  const std::vector<SlotStatus> status = ran_on.Slots();
  bool lost_a_slot = false;
  for (const BatchSlice& slice : slices) {
    const size_t s = static_cast<size_t>(slice.slot);
    if (s < status.size() && s < slots.size() && !status[s].health.ok()) {
      lost_a_slot = true;
      slots[s].lost = true;
    }
  }
  if (!lost_a_slot) return std::nullopt;
  return RouteOf(rows, now);  // Leaves the lost slots out.
}

void Scheduler::Core::Dispatch(std::shared_ptr<Batch> batch) {
  batch->dispatched = env.clock->Now();
  if (batch->slices.empty()) {
    // No healthy slot: nothing can run it.
    Finished(std::move(batch),
             absl::UnavailableError(
                 absl::StrCat("model '", env.model, "': none of its slots can run it")),
             {}, nullptr);
    return;
  }
  if (env.observer != nullptr && !batch->rerouted) {
    env.observer->OnBatch(env.model, batch->rows, static_cast<int>(batch->requests.size()));
  }
  std::vector<Tensor> inputs;
  OutputSink* sink = nullptr;
  // Asked by the slots before each slice and between kernels, until the
  // Run's done: the batch holds its requests until then (Finished).
  Servable::StillWanted still_wanted = [requests = &batch->requests, clock = env.clock] {
    return AnyStillWanted(*requests, clock->Now());
  };
  if (batch->requests.size() == 1) {
    ScheduledRequest& only = *batch->requests[0];
    inputs = only.inputs;
    if (batch->sink == nullptr) batch->sink = std::make_unique<AllocateOnce>(only.sink);
    sink = batch->sink.get();
  } else {
    // Rows of every request, one after another, in one tensor per input.
    const ScheduledRequest& head = *batch->requests[0];
    for (size_t i = 0; i < head.inputs.size(); ++i) {
      Shape shape = head.inputs[i].shape();
      shape[0] = batch->rows;
      Tensor fused = Tensor::Host(head.inputs[i].dtype(), shape);
      char* at = static_cast<char*>(fused.raw_data());
      for (const auto& request : batch->requests) {
        const Tensor& part = request->inputs[i];
        std::memcpy(at, part.raw_data(), part.byte_size());
        at += part.byte_size();
      }
      inputs.push_back(std::move(fused));
    }
    batch->fused = std::make_unique<BatchOutputs>();
    sink = batch->fused.get();
  }
  batch->gather = env.clock->Now() - batch->dispatched;
  auto run = [flight = BatchInFlight(this, batch), inputs = std::move(inputs), sink,
              still_wanted = std::move(still_wanted)](
                 absl::StatusOr<std::shared_ptr<Servable>> trained) mutable {
    Core* core = flight.core();
    if (!trained.ok()) {
      core->Finished(flight.batch(), trained.status(), {}, nullptr);
      return;
    }
    flight.Hold(*std::move(trained));
    Servable& servable = flight.servable();
    std::shared_ptr<Batch> batch = flight.batch();
    servable.Run(
        std::move(inputs), batch->slices, sink, std::move(still_wanted),
        [flight = std::move(flight)](absl::Status status, std::vector<BatchSlice> slices) mutable {
          flight.core()->Finished(flight.batch(), std::move(status), std::move(slices),
                                  &flight.servable());
        });
  };
  if (env.published != nullptr) {
    env.published->Acquire(std::move(run));
  } else {
    run(env.servable);
  }
}

void Scheduler::Core::RunStep(std::shared_ptr<Batch> batch) {
  batch->dispatched = env.clock->Now();
  ScheduledRequest& step = *batch->requests[0];
  absl::Status runnable =
      step.context.StillWanted("before its training step ran", env.clock->Now());
  if (runnable.ok() && env.trainable == nullptr) {
    runnable = absl::FailedPreconditionError(
        absl::StrCat("model '", env.model, "' cannot be trained by this server"));
  }
  if (!runnable.ok()) {
    StepFinished(std::move(batch), std::move(runnable));
    return;
  }
  std::vector<Tensor> inputs = step.inputs;
  Tensor targets = *step.targets;
  env.trainable->Step(std::move(inputs), std::move(targets), step.shard,
                      [flight = BatchInFlight(this, std::move(batch))](
                          absl::StatusOr<DataParallelTrainer::StepResult> result) mutable {
                        flight.core()->StepFinished(flight.batch(), std::move(result));
                      });
}

void Scheduler::Core::StepFinished(std::shared_ptr<Batch> batch,
                                   absl::StatusOr<DataParallelTrainer::StepResult> result) {
  const absl::Time finished = env.clock->Now();
  {
    absl::MutexLock lock(&mu);
    training = false;
    bytes_in_flight -= batch->bytes;
    --running;
    wake.Signal();
  }
  std::unique_ptr<ScheduledRequest> step = std::move(batch->requests[0]);
  ScheduleReport report;
  report.batch_rows = batch->rows;
  report.batch_requests = 1;
  report.queue = batch->dispatched - step->enqueued;
  report.infer = finished - batch->dispatched;
  absl::Status status = result.status();
  if (result.ok()) report.step = *std::move(result);
  Answer(std::move(step), std::move(status), std::move(report));
}

void Scheduler::Core::Finished(std::shared_ptr<Batch> batch, absl::Status status,
                               std::vector<BatchSlice> slices, const Servable* servable) {
  const absl::Time finished = env.clock->Now();
  struct Speed {
    int slot;
    double rows_per_second, share;
  };
  std::vector<Speed> speeds;  // Told to the observer once the lock is released.
  if (Reroute(batch, status, slices, servable != nullptr ? *servable : *env.servable)) return;
  {
    absl::MutexLock lock(&mu);
    Release(*batch, finished);
    for (const BatchSlice& slice : slices) {
      // Not run, or run with other slots' cores (not the slot's own speed).
      if (slice.seconds <= 0 || slice.widened) continue;
      SlotState& slot = slots[slice.slot];
      slot.speed.Record(slice.rows(), slice.seconds);
      slot.last_rows = slice.rows();
      slot.last_ran = finished;
      if (status.ok()) {
        speeds.push_back({slice.slot, slot.speed.RowsPerSecond(slot.last_rows), slot.share});
      }
    }
    bytes_in_flight -= batch->bytes;
    --running;
    // A slot is free: the loop has work only when requests wait (a step
    // among them) or it is stopping. Waking it for nothing costs a wake-up
    // of its thread per request.
    if (!queue.empty() || stopping) wake.Signal();
  }
  if (env.observer != nullptr) {
    for (const Speed& speed : speeds) {
      env.observer->OnSlotSpeed(env.model, slot_status[speed.slot].slot,
                                slot_status[speed.slot].device, speed.rows_per_second, speed.share);
    }
  }
  ScheduleReport report;
  report.servable = servable;
  report.slices = std::move(slices);
  report.batch_rows = batch->rows;
  report.batch_requests = static_cast<int>(batch->requests.size());
  report.infer = finished - batch->dispatched - batch->gather;
  report.gather = batch->gather;
  int64_t first_row = 0;
  for (std::unique_ptr<ScheduledRequest>& request : batch->requests) {
    ScheduleReport mine = report;
    mine.first_row = first_row;
    mine.queue = batch->dispatched - request->enqueued;
    absl::Status answer = status;
    const absl::Time scatter_start = env.clock->Now();
    if (answer.ok() && batch->fused != nullptr) {
      // Its own rows of every output, at its offset in the batch.
      const std::vector<Tensor>& outputs = batch->fused->outputs;
      for (size_t j = 0; j < outputs.size() && answer.ok(); ++j) {
        TensorType type = outputs[j].type();
        if (type.shape.empty() || type.shape[0] != batch->rows) {
          answer = absl::FailedPreconditionError(
              absl::StrCat("output ", j, " of model '", env.model,
                           "' does not keep the batch in dim 0, "
                           "so requests cannot share a batch; serve it without dynamic batching"));
          break;
        }
        const size_t row_bytes = RowBytes(type);
        type.shape[0] = request->rows();
        absl::StatusOr<void*> to = request->sink->Allocate(static_cast<int>(j), type);
        if (!to.ok()) {
          answer = to.status();
          break;
        }
        std::memcpy(*to, static_cast<const char*>(outputs[j].raw_data()) + row_bytes * first_row,
                    row_bytes * static_cast<size_t>(request->rows()));
      }
    }
    mine.scatter = env.clock->Now() - scatter_start;
    first_row += request->rows();
    Answer(std::move(request), std::move(answer), std::move(mine));
  }
}

Scheduler::Scheduler(Environment environment)
    : core_(std::make_shared<Core>(std::move(environment))) {
  // The model's pending count (and with it its other series) exists from the
  // start, at 0: autoscalers and alerts see an idle model rather than none.
  Core::PendingCount none;
  {
    absl::MutexLock lock(&core_->mu);
    none = core_->CountPending();
  }
  core_->ReportPending(none);
  core_->thread = std::thread([core = core_] { core->Loop(); });
}

Scheduler::~Scheduler() {
  std::vector<RequestQueue::Expired> left;
  {
    absl::MutexLock lock(&core_->mu);
    core_->stopping = true;
    while (std::unique_ptr<ScheduledRequest> request = core_->queue.Pop()) {
      core_->bytes_in_flight -= request->bytes;
      left.emplace_back(std::move(request),
                        absl::UnavailableError(absl::StrCat("model '", core_->env.model,
                                                            "' stopped serving before it ran")));
    }
    core_->wake.Signal();
  }
  for (auto& [request, status] : left) core_->Answer(std::move(request), std::move(status), {});
  if (core_->thread.get_id() == std::this_thread::get_id()) {
    core_->thread.detach();  // It holds the core and ends on its own.
    return;
  }
  core_->thread.join();
  absl::MutexLock lock(&core_->mu);
  core_->mu.Await(absl::Condition(
      +[](int* callbacks) { return *callbacks == 0; }, &core_->callbacks));
}

void Scheduler::Submit(std::unique_ptr<ScheduledRequest> request) {
  Core& core = *core_;
  uint64_t bytes = request->targets ? request->targets->byte_size() : 0;
  for (const Tensor& t : request->inputs) bytes += t.byte_size();
  request->bytes = bytes;
  absl::Status refused;
  const char* reason = "";
  Core::PendingCount pending;
  {
    absl::MutexLock lock(&core.mu);
    const uint64_t bound = core.env.options.max_queue_bytes;
    if (core.stopping) {
      refused =
          absl::UnavailableError(absl::StrCat("model '", core.env.model, "' is no longer served"));
      reason = "stopping";
    } else if (bound > 0 && core.bytes_in_flight > 0 && core.bytes_in_flight + bytes > bound) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "model '", core.env.model, "' already holds ", core.bytes_in_flight,
          " bytes of inputs queued or running; this request's ", bytes,
          " more would pass the bound of ", bound, " (--max-queue-bytes); retry later"));
      reason = "queue_bytes";
    } else {
      request->sequence = core.next_sequence;
      const absl::Time now = core.env.clock->Now();
      const ScheduledRequest* queued = request.get();  // The queue's once pushed.
      request->arrived_idle = core.running == 0 && core.queue.empty();
      refused = core.queue.Push(request, now);
      if (refused.ok()) {
        ++core.next_sequence;
        core.bytes_in_flight += bytes;
        if (!core.StartOnArrival(now) && core.LoopMustWake(*queued, now)) core.wake.Signal();
      } else {
        reason = "queue_full";
      }
    }
    pending = core.CountPending();
  }
  if (!refused.ok()) {
    if (core.env.observer != nullptr) core.env.observer->OnRefused(core.env.model, reason);
    // Not sequenced: nothing waits for its answer to keep order.
    std::move(request->done)(std::move(refused), ScheduleReport{});
    return;
  }
  core.ReportPending(pending);
}

absl::Status Scheduler::Warm(double budget_seconds) {
  Core& core = *core_;
  const Model& model = core.env.servable->model();
  for (const TensorSpec& input : model.inputs()) {
    for (size_t d = 1; d < input.type.shape.size(); ++d) {
      if (input.type.shape[d] < 0) return absl::OkStatus();  // Open dims: sizes unknown.
    }
    if (input.type.shape.empty()) return absl::OkStatus();  // No batch dim to vary.
  }
  const SchedulerOptions& o = core.env.options;
  std::vector<int64_t> sizes = {1, 2};  // 2 tells whether outputs follow the batch.
  // A model whose dim 0 is fixed (a detection model's image [3, H, W]) may
  // not plan at other sizes: its own size is warmed, and a failure at
  // another is skipped instead of failing the load.
  int64_t fixed_rows = 0;
  if (!model.inputs().empty() && model.inputs()[0].type.shape[0] > 0) {
    fixed_rows = model.inputs()[0].type.shape[0];
    sizes.push_back(fixed_rows);
  }
  for (int64_t s = 4; s <= o.warmup_max_rows; s *= 2) sizes.push_back(s);
  sizes.insert(sizes.end(), o.preferred_batch_sizes.begin(), o.preferred_batch_sizes.end());
  sizes.insert(sizes.end(), o.warmup_batch_sizes.begin(), o.warmup_batch_sizes.end());
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const int64_t max_rows = o.max_batch_size > 0 ? o.max_batch_size : INT64_MAX;

  const size_t slot_count = core.slot_status.size();
  for (size_t slot = 0; slot < slot_count; ++slot) {
    if (!core.slot_status[slot].health.ok()) continue;
    int64_t fitted = 0;  // The largest size that ran.
    for (int64_t rows : sizes) {
      if (rows > max_rows) break;
      std::vector<Tensor> inputs;
      for (const TensorSpec& input : model.inputs()) {
        Shape shape = input.type.shape;
        shape[0] = rows;
        inputs.push_back(Tensor::Host(input.type.dtype, shape));
      }
      // Once: the first run's cold caches make it a little slow, and serving
      // measures every slice again; a second pass doubled a repository's load.
      BatchOutputs outputs;
      absl::Notification done;
      absl::Status status;
      std::vector<BatchSlice> ran;
      core.env.servable->Run(inputs, {BatchSlice{static_cast<int>(slot), 0, rows}}, &outputs,
                             nullptr, [&](absl::Status s, std::vector<BatchSlice> slices) {
                               status = std::move(s);
                               ran = std::move(slices);
                               done.Notify();
                             });
      done.WaitForNotification();
      if (absl::IsResourceExhausted(status) && !ran.empty() && ran[0].out_of_memory) {
        // The slot's memory holds smaller slices only: routing caps its
        // share, and larger sizes are not tried.
        absl::MutexLock lock(&core.mu);
        core.slots[slot].max_rows = std::min(core.slots[slot].max_rows, fitted);
        core.slots[slot].capped_at = core.env.clock->Now();
        break;
      }
      if (!status.ok() && fixed_rows > 0 && rows != fixed_rows) continue;
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat("warming slot ", core.slot_status[slot].slot, " on ", rows,
                                         " rows: ", status.message()));
      }
      if (rows > 1) {
        for (const Tensor& out : outputs.outputs) {
          if (out.rank() == 0 || out.shape()[0] != rows) {
            absl::MutexLock lock(&core.mu);
            core.fuse = false;
          }
        }
      }
      const double seconds = ran.empty() ? 0 : ran[0].seconds;
      if (ran.empty() || !ran[0].widened) {
        absl::MutexLock lock(&core.mu);
        core.slots[slot].speed.Record(rows, seconds);
        core.slots[slot].last_ran = core.env.clock->Now();
      }
      if (seconds > budget_seconds) break;
      fitted = rows;
    }
  }
  core.env.servable->ReleaseIdleMemory();
  return absl::OkStatus();
}

std::vector<Scheduler::SlotReport> Scheduler::Slots() const {
  absl::MutexLock lock(&core_->mu);
  std::vector<SlotReport> reports;
  for (size_t s = 0; s < core_->slots.size(); ++s) {
    const Core::SlotState& state = core_->slots[s];
    reports.push_back(SlotReport{core_->slot_status[s].slot, core_->slot_status[s].device,
                                 state.speed.measured(), state.speed.RowsPerSecond(state.last_rows),
                                 state.speed.fixed_seconds(), state.speed.seconds_per_row()});
  }
  return reports;
}

size_t Scheduler::pending() const {
  absl::MutexLock lock(&core_->mu);
  return core_->queue.size();
}

const SchedulerOptions& Scheduler::options() const { return core_->env.options; }

}  // namespace replicad
