#include "server/server_metrics.h"

#include "absl/status/status.h"

namespace replicad {

ServerMetrics::ServerMetrics(metrics::Registry& registry)
    : requests_(registry.AddCounter("replicad_requests_total",
                                    "RPCs answered, by model, method and gRPC status code.",
                                    {"model", "method", "code"})),
      request_duration_(registry.AddHistogram("replicad_request_duration_seconds",
                                              "Time from receiving an RPC to answering it.",
                                              {"model", "method"})),
      samples_(registry.AddCounter("replicad_samples_total",
                                   "Batch rows predicted successfully, by model.", {"model"})),
      slot_samples_(registry.AddCounter("replicad_slot_samples_total",
                                        "Batch rows run by each replica slot.",
                                        {"model", "slot", "device"})),
      slot_busy_(registry.AddCounter("replicad_slot_busy_seconds_total",
                                     "Seconds each replica slot spent running its slices.",
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
      train_accuracy_(registry.AddGauge(
          "replicad_train_accuracy",
          "Accuracy of the last training step's batch (classification losses).", {"model"})),
      train_seconds_(registry.AddCounter(
          "replicad_train_seconds_total",
          "Training time by phase: forward (with the loss) and backward per slot; reduce and "
          "optimizer (slot all).",
          {"model", "slot", "phase"})),
      train_reduced_bytes_(registry.AddCounter("replicad_train_reduced_bytes_total",
                                               "Gradient bytes summed by the reduction.",
                                               {"model"})),
      slot_memory_(registry.AddGauge("replicad_slot_memory_bytes",
                                     "Device memory held by each slot's pool: in use by "
                                     "tensors, or cached for reuse.",
                                     {"model", "slot", "device", "state"})),
      slot_healthy_(registry.AddGauge(
          "replicad_slot_healthy",
          "1 while the slot's device can run work; 0 after a fault that takes it out.",
          {"model", "slot", "device"})) {}

ServerMetrics::SlotCounters ServerMetrics::CountersFor(const Replica& replica) {
  const std::string model = replica.model().name();
  const std::string device = DeviceIdToString(replica.device().info().id);
  const std::vector<std::string> labels = {model, replica.slot().name, device};
  return SlotCounters{&slot_samples_.WithLabels(labels), &slot_busy_.WithLabels(labels),
                      &slot_memory_.WithLabels({model, replica.slot().name, device, "in_use"}),
                      &slot_memory_.WithLabels({model, replica.slot().name, device, "cached"}),
                      &slot_healthy_.WithLabels(labels)};
}

void ServerMetrics::RecordRequest(const std::string& model, const std::string& method,
                                  const absl::Status& status, double seconds) {
  requests_.WithLabels({model, method, absl::StatusCodeToString(status.code())}).Increment();
  request_duration_.WithLabels({model, method}).Observe(seconds);
}

void ServerMetrics::OnInferred(const LoadedModel& model, int64_t rows) {
  samples_.WithLabels({model.name}).Increment(static_cast<double>(rows));
}

void ServerMetrics::AddDeviceSlot(const std::string& device) {
  device_slots_.WithLabels({device}).Add(1);
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
  counters.healthy->Set(device.health().ok() ? 1 : 0);
}

void ServerMetrics::OnTrainStep(const LoadedModel& loaded,
                                const DataParallelTrainer::StepResult& step) {
  const std::string& model = loaded.name;
  // The trainer's slots are the serving slots, in the same order.
  const std::vector<SlotStatus> slots = loaded.servable->Slots();
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
  train_reduced_bytes_.WithLabels({model}).Increment(static_cast<double>(step.reduced_bytes));
}

}  // namespace replicad
