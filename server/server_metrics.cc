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
                                      {"device"})) {}

void ServerMetrics::RecordRequest(const std::string& model, const std::string& method,
                                  const absl::Status& status, double seconds) {
  requests_.WithLabels({model, method, absl::StatusCodeToString(status.code())}).Increment();
  request_duration_.WithLabels({model, method}).Observe(seconds);
}

void ServerMetrics::RecordSamples(const std::string& model, int64_t rows) {
  samples_.WithLabels({model}).Increment(static_cast<double>(rows));
}

void ServerMetrics::AddDeviceSlot(const std::string& device) {
  device_slots_.WithLabels({device}).Add(1);
}

void ServerMetrics::AddReplica(const Replica& replica) {
  std::vector<std::string> labels = {replica.model().name(), replica.slot().name,
                                     DeviceIdToString(replica.device().info().id)};
  slots_[&replica] = SlotCounters{&slot_samples_.WithLabels(labels), &slot_busy_.WithLabels(labels)};
}

void ServerMetrics::OnSliceRun(const Replica& replica, int64_t rows, double busy_seconds) {
  auto it = slots_.find(&replica);
  if (it == slots_.end()) return;  // Not registered: a programming error, not worth a crash.
  it->second.samples->Increment(static_cast<double>(rows));
  it->second.busy_seconds->Increment(busy_seconds);
}

}  // namespace replicad
