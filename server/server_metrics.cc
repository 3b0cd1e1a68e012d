#include "server/server_metrics.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/model/compute_precision.h"

namespace replicad {
namespace {

// Request phases: a request a free slot takes at once queues for microseconds,
// and binding inputs or scattering outputs takes tens of them, so the buckets
// start at 10 us, below DefaultLatencyBuckets' 0.5 ms, and end as it does.
std::vector<double> PhaseBuckets() {
  std::vector<double> bounds = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025};
  for (double bound : metrics::DefaultLatencyBuckets()) bounds.push_back(bound);
  return bounds;
}

// Rows per batch: powers of two up to 1024; larger batches land in +Inf.
std::vector<double> BatchSizeBuckets() {
  std::vector<double> bounds;
  for (double rows = 1; rows <= 1024; rows *= 2) bounds.push_back(rows);
  return bounds;
}

}  // namespace

ServerMetrics::ServerMetrics(metrics::Registry& registry)
    : requests_(registry.AddCounter("replicad_requests_total",
                                    "RPCs answered, by model, method and gRPC status code.",
                                    {"model", "method", "code"})),
      request_duration_(registry.AddHistogram("replicad_request_duration_seconds",
                                              "Time from receiving an RPC to answering it.",
                                              {"model", "method"})),
      samples_(registry.AddCounter("replicad_samples_total",
                                   "Batch rows predicted successfully, by model.", {"model"})),
      request_queue_(registry.AddHistogram(
          "replicad_request_queue_seconds",
          "Time a successful request waited in its model's queue, admission to its batch's "
          "dispatch (ModelStatistics' queue).",
          {"model"}, PhaseBuckets())),
      request_compute_input_(registry.AddHistogram(
          "replicad_request_compute_input_seconds",
          "Time checking a successful request and binding its inputs, copying them into "
          "its batch included (ModelStatistics' compute_input).",
          {"model"}, PhaseBuckets())),
      request_compute_infer_(registry.AddHistogram(
          "replicad_request_compute_infer_seconds",
          "Time the slots ran a successful request's batch, device copies included "
          "(ModelStatistics' compute_infer).",
          {"model"}, PhaseBuckets())),
      request_compute_output_(registry.AddHistogram(
          "replicad_request_compute_output_seconds",
          "Time after the slots finished a successful request's batch, taking its rows of "
          "the outputs (ModelStatistics' compute_output).",
          {"model"}, PhaseBuckets())),
      batch_size_(registry.AddHistogram("replicad_batch_size",
                                        "Rows of each batch handed to the slots, by model.",
                                        {"model"}, BatchSizeBuckets())),
      batches_(registry.AddCounter("replicad_batches_total",
                                   "Batches handed to the slots, by model.", {"model"})),
      batched_requests_(registry.AddCounter(
          "replicad_batched_requests_total",
          "Requests fused into the batches handed to the slots, by model.", {"model"})),
      pending_requests_(registry.AddGauge("replicad_pending_requests",
                                          "Requests waiting in the model's queue.", {"model"})),
      refused_requests_(registry.AddCounter(
          "replicad_refused_requests_total",
          "Requests the scheduler answered without running them, by reason: queue_full, "
          "queue_bytes, timeout (queue policy), deadline, cancelled, stopping.",
          {"model", "reason"})),
      slot_rows_per_second_(registry.AddGauge(
          "replicad_slot_rows_per_second",
          "Each slot's measured speed in rows per second at the slice size it last ran.",
          {"model", "slot", "device"})),
      slot_share_(registry.AddGauge(
          "replicad_slot_share", "Fraction of the rows of the last batch split that each slot got.",
          {"model", "slot", "device"})),
      slot_samples_(registry.AddCounter("replicad_slot_samples_total",
                                        "Batch rows run by each replica slot.",
                                        {"model", "slot", "device"})),
      pipelines_(registry),
      slot_busy_(registry.AddCounter("replicad_slot_busy_seconds_total",
                                     "Seconds each replica slot spent running its slices.",
                                     {"model", "slot", "device"})),
      slot_plans_built_(registry.AddCounter(
          "replicad_slot_plans_built_total",
          "Execution plans each slot built for a slice size its cache did not hold (at load, "
          "on first use, or again after --max-plans-per-slot evicted it).",
          {"model", "slot", "device"})),
      slot_plan_build_seconds_(
          registry.AddCounter("replicad_slot_plan_build_seconds_total",
                              "Seconds spent building those plans, while their batches waited.",
                              {"model", "slot", "device"})),
      device_slots_(registry.AddGauge("replicad_device_slots",
                                      "Replica slots placed on each device, over all models.",
                                      {"device"})),
      train_steps_(registry.AddCounter("replicad_train_steps_total",
                                       "TrainStep calls applied, by model.", {"model"})),
      train_samples_(registry.AddCounter("replicad_train_samples_total",
                                         "Batch rows trained on, by model.", {"model"})),
      train_loss_(registry.AddGauge("replicad_train_loss",
                                    "Mean loss of the last training step, by model.", {"model"})),
      train_loss_scale_(registry.AddGauge(
          "replicad_train_loss_scale",
          "fp16 training: the loss scale the last step's gradients were computed with.",
          {"model"})),
      train_accuracy_(registry.AddGauge(
          "replicad_train_accuracy",
          "Accuracy of the last training step's batch (classification losses).", {"model"})),
      train_seconds_(registry.AddCounter(
          "replicad_train_seconds_total",
          "Training time by phase: forward (with the loss) and backward per slot; reduce, "
          "optimizer and queue (waiting for the batches before the step) with slot all.",
          {"model", "slot", "phase"})),
      train_reduced_bytes_(registry.AddCounter("replicad_train_reduced_bytes_total",
                                               "Gradient bytes summed by the reduction.",
                                               {"model"})),
      train_not_applied_(registry.AddCounter(
          "replicad_train_steps_not_applied_total",
          "TrainStep calls that changed nothing: refused with an error (code), or skipped "
          "for a non-finite loss or gradient (non_finite_steps SKIP).",
          {"model", "outcome", "code"})),
      train_checkpoints_(registry.AddCounter(
          "replicad_train_checkpoints_total",
          "Periodic checkpoints (checkpoint_every_steps) written or failed; a failed one "
          "leaves its step applied.",
          {"model", "outcome"})),
      slot_memory_(registry.AddGauge("replicad_slot_memory_bytes",
                                     "Device memory held by each slot's pool: in use by "
                                     "tensors, or cached for reuse.",
                                     {"model", "slot", "device", "state"})),
      slot_plan_memory_(registry.AddGauge(
          "replicad_slot_plan_memory_bytes",
          "Memory the execution plans each slot caches hold (intermediate values, scratch, "
          "constants), at most --plan-memory-per-slot.",
          {"model", "slot", "device"})),
      slot_healthy_(registry.AddGauge(
          "replicad_slot_healthy",
          "1 while the slot's device can run work; 0 after a fault that takes it out.",
          {"model", "slot", "device"})),
      model_precision_(registry.AddGauge(
          "replicad_model_precision",
          "1 for the precision the model's convolutions and weight products compute in "
          "(--precision, or its config.pbtxt parameter), 0 for the others.",
          {"model", "precision"})) {}

ServerMetrics::SlotCounters ServerMetrics::CountersFor(const Replica& replica) {
  const std::string model = replica.model().name();
  const std::string device = DeviceIdToString(replica.device().info().id);
  const std::vector<std::string> labels = {model, replica.slot().name, device};
  return SlotCounters{&slot_samples_.WithLabels(labels),
                      &slot_busy_.WithLabels(labels),
                      &slot_plans_built_.WithLabels(labels),
                      &slot_plan_build_seconds_.WithLabels(labels),
                      &slot_memory_.WithLabels({model, replica.slot().name, device, "in_use"}),
                      &slot_memory_.WithLabels({model, replica.slot().name, device, "cached"}),
                      &slot_plan_memory_.WithLabels(labels),
                      &slot_healthy_.WithLabels(labels)};
}

void ServerMetrics::RecordRequest(const std::string& model, const std::string& method,
                                  const absl::Status& status, double seconds) {
  requests_.WithLabels({model, method, absl::StatusCodeToString(status.code())}).Increment();
  request_duration_.WithLabels({model, method}).Observe(seconds);
}

const ServerMetrics::ModelSeries& ServerMetrics::SeriesFor(const std::string& model) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = models_.find(model);
    if (it != models_.end()) return *it->second;
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<const ModelSeries>& series = models_[model];
  if (series == nullptr) {
    auto made = std::make_unique<ModelSeries>();
    made->samples = &samples_.WithLabels({model});
    made->queue = &request_queue_.WithLabels({model});
    made->compute_input = &request_compute_input_.WithLabels({model});
    made->compute_infer = &request_compute_infer_.WithLabels({model});
    made->compute_output = &request_compute_output_.WithLabels({model});
    made->batch_size = &batch_size_.WithLabels({model});
    made->batches = &batches_.WithLabels({model});
    made->batched_requests = &batched_requests_.WithLabels({model});
    made->pending = &pending_requests_.WithLabels({model});
    // Every reason's series at 0 from the start, so rate() and alerts see the
    // first refusal rather than a series appearing.
    for (size_t i = 0; i < kRefusalReasons.size(); ++i) {
      made->refused[i] = &refused_requests_.WithLabels({model, kRefusalReasons[i]});
    }
    series = std::move(made);
  }
  return *series;
}

void ServerMetrics::OnInferred(const LoadedModel& model, int64_t rows, const RequestTimes& times) {
  const ModelSeries& series = SeriesFor(model.name);
  series.samples->Increment(static_cast<double>(rows));
  series.queue->Observe(absl::ToDoubleSeconds(times.queue));
  series.compute_input->Observe(absl::ToDoubleSeconds(times.compute_input));
  series.compute_infer->Observe(absl::ToDoubleSeconds(times.compute_infer));
  series.compute_output->Observe(absl::ToDoubleSeconds(times.compute_output));
}

void ServerMetrics::OnBatch(const std::string& model, int64_t rows, int requests) {
  const ModelSeries& series = SeriesFor(model);
  series.batch_size->Observe(static_cast<double>(rows));
  series.batches->Increment();
  series.batched_requests->Increment(static_cast<double>(requests));
}

void ServerMetrics::OnRefused(const std::string& model, const char* reason) {
  const ModelSeries& series = SeriesFor(model);
  for (size_t i = 0; i < kRefusalReasons.size(); ++i) {
    if (std::strcmp(reason, kRefusalReasons[i]) == 0) {
      series.refused[i]->Increment();
      return;
    }
  }
  refused_requests_.WithLabels({model, reason}).Increment();
}

void ServerMetrics::OnPending(const std::string& model, size_t pending) {
  SeriesFor(model).pending->Set(static_cast<double>(pending));
}

void ServerMetrics::OnSlotSpeed(const std::string& model, const std::string& slot,
                                const std::string& device, double rows_per_second, double share) {
  auto key = std::make_tuple(model, slot, device);
  SlotSpeedSeries series{nullptr, nullptr};
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = slot_speeds_.find(key);
    if (it != slot_speeds_.end()) series = it->second;
  }
  if (series.share == nullptr) {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = slot_speeds_.try_emplace(std::move(key));
    if (inserted) {
      it->second.rows_per_second = &slot_rows_per_second_.WithLabels({model, slot, device});
      it->second.share = &slot_share_.WithLabels({model, slot, device});
    }
    series = it->second;
  }
  series.rows_per_second->Set(rows_per_second);
  series.share->Set(share);
}

void ServerMetrics::AddDeviceSlot(const std::string& device) {
  device_slots_.WithLabels({device}).Add(1);
}

void ServerMetrics::AddModel(const LoadedModel& loaded) {
  const std::string& model = loaded.name;
  SeriesFor(model);
  // Every precision's series, so that a reload in another one moves the 1.
  const ComputePrecision precision = MarkedComputePrecision(loaded.model().graph());
  for (ComputePrecision each : {ComputePrecision::kFloat32, ComputePrecision::kBFloat16,
                                ComputePrecision::kTensorFloat32}) {
    model_precision_.WithLabels({model, std::string(ComputePrecisionName(each))})
        .Set(each == precision ? 1 : 0);
  }
  if (loaded.training == nullptr) return;
  train_steps_.WithLabels({model});
  train_samples_.WithLabels({model});
  train_reduced_bytes_.WithLabels({model});
  train_not_applied_.WithLabels({model, "skipped", "OK"});
  // The codes a step is refused with by its own checks (TrainStep's
  // contract); others appear at their first refusal.
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kUnavailable,
        absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kCancelled}) {
    train_not_applied_.WithLabels({model, "refused", absl::StatusCodeToString(code)});
  }
  train_checkpoints_.WithLabels({model, "written"});
  train_checkpoints_.WithLabels({model, "failed"});
}

void ServerMetrics::AddReplica(const Replica& replica) { CountersFor(replica).healthy->Set(1); }

void ServerMetrics::OnSliceRun(const Replica& replica, int64_t rows, double busy_seconds) {
  // Looked up by labels each time: models load and unload while serving,
  // and a set rebuilt with trained weights shares its model's series.
  const SlotCounters counters = CountersFor(replica);
  counters.samples->Increment(static_cast<double>(rows));
  counters.busy_seconds->Increment(busy_seconds);
  const Device& device = replica.device();
  counters.memory_in_use->Set(static_cast<double>(device.memory_in_use_bytes()));
  counters.memory_cached->Set(static_cast<double>(device.memory_cached_bytes()));
  counters.plan_memory->Set(static_cast<double>(replica.plan_memory_bytes()));
  counters.healthy->Set(device.health().ok() ? 1 : 0);
}

void ServerMetrics::OnPlansBuilt(const Replica& replica, int count, double seconds) {
  const SlotCounters counters = CountersFor(replica);
  counters.plans_built->Increment(static_cast<double>(count));
  counters.plan_build_seconds->Increment(seconds);
  counters.plan_memory->Set(static_cast<double>(replica.plan_memory_bytes()));
}

void ServerMetrics::OnTrainStep(const LoadedModel& loaded,
                                const DataParallelTrainer::StepResult& step,
                                absl::Duration queued) {
  const std::string& model = loaded.name;
  // The trainer's slots are the serving slots, in the same order.
  const std::vector<SlotStatus> slots = loaded.servable->Slots();
  if (!step.checkpoint_path.empty()) {
    train_checkpoints_.WithLabels({model, "written"}).Increment();
  } else if (!step.checkpoint_status.ok()) {
    train_checkpoints_.WithLabels({model, "failed"}).Increment();
  }
  if (step.loss_scale > 0) train_loss_scale_.WithLabels({model}).Set(step.loss_scale);
  if (!step.skipped.empty()) {
    train_not_applied_.WithLabels({model, "skipped", "OK"}).Increment();
    return;
  }
  train_steps_.WithLabels({model}).Increment();
  train_samples_.WithLabels({model}).Increment(static_cast<double>(step.samples));
  train_loss_.WithLabels({model}).Set(step.loss);
  if (step.accuracy) train_accuracy_.WithLabels({model}).Set(*step.accuracy);
  for (const DataParallelTrainer::SliceResult& slice : step.slices) {
    const std::string& slot = slots[slice.slice.slot].slot;
    train_seconds_.WithLabels({model, slot, "forward"}).Increment(slice.forward_seconds);
    train_seconds_.WithLabels({model, slot, "backward"})
        .Increment(slice.compute_seconds - slice.forward_seconds);
  }
  train_seconds_.WithLabels({model, "all", "reduce"}).Increment(step.reduce_seconds);
  train_seconds_.WithLabels({model, "all", "optimizer"}).Increment(step.optimizer_seconds);
  train_seconds_.WithLabels({model, "all", "queue"}).Increment(absl::ToDoubleSeconds(queued));
  train_reduced_bytes_.WithLabels({model}).Increment(static_cast<double>(step.reduced_bytes));
}

void ServerMetrics::OnTrainStepRefused(const LoadedModel& loaded, const absl::Status& status) {
  train_not_applied_.WithLabels({loaded.name, "refused", absl::StatusCodeToString(status.code())})
      .Increment();
}

}  // namespace replicad
