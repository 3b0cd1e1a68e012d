#ifndef REPLICAD_SERVER_SERVER_METRICS_H_
#define REPLICAD_SERVER_SERVER_METRICS_H_

#include <string>

#include "absl/status/status.h"
#include "core/metrics/registry.h"
#include "core/device/device_map.h"
#include "core/serve/replica_set.h"
#include "core/serve/serving_core.h"
#include "core/train/data_parallel_trainer.h"

namespace replicad {

// The daemon's metrics, all under replicad_*:
//   requests_total{model,method,code}             counter
//   request_duration_seconds{model,method}        histogram
//   samples_total{model}                          counter (rows predicted)
//   slot_samples_total{model,slot,device}         counter
//   slot_busy_seconds_total{model,slot,device}    counter (time in kernels)
//   device_slots{device}                          gauge
//   train_steps_total{model}                      counter
//   train_samples_total{model}                    counter
//   train_loss{model}, train_accuracy{model}      gauges (the last step's)
//   train_seconds_total{model,slot,phase}         counter; phase forward and backward per
//                                                 slot, reduce and optimizer with slot "all"
//   train_reduced_bytes_total{model}              counter (gradient bytes reduced)
//   slot_memory_bytes{model,slot,device,state}    gauge; device memory of a slot's pool,
//                                                 state in_use or cached (0 on CPU slots)
//   slot_healthy{model,slot,device}               gauge; 0 once the slot's device failed for
//                                                 good (it then gets no more slices)
// The slot gauges are refreshed after every slice the slot runs.
// Thread-safe; the registry must outlive it.
class ServerMetrics : public SliceObserver, public ServingObserver {
 public:
  explicit ServerMetrics(metrics::Registry& registry);

  void RecordRequest(const std::string& model, const std::string& method,
                     const absl::Status& status, double seconds);
  void AddDeviceSlot(const std::string& device);
  // Shows a newly loaded replica's slot series (healthy) before it runs.
  void AddReplica(const Replica& replica);

  void OnSliceRun(const Replica& replica, int64_t rows, double busy_seconds) override;

  // ServingObserver: samples predicted, and the training series.
  void OnInferred(const LoadedModel& model, int64_t rows) override;
  void OnTrainStep(const LoadedModel& model, const DataParallelTrainer::StepResult& step) override;

 private:
  metrics::CounterFamily& requests_;
  metrics::HistogramFamily& request_duration_;
  metrics::CounterFamily& samples_;
  metrics::CounterFamily& slot_samples_;
  metrics::CounterFamily& slot_busy_;
  metrics::GaugeFamily& device_slots_;
  metrics::CounterFamily& train_steps_;
  metrics::CounterFamily& train_samples_;
  metrics::GaugeFamily& train_loss_;
  metrics::GaugeFamily& train_accuracy_;
  metrics::CounterFamily& train_seconds_;
  metrics::CounterFamily& train_reduced_bytes_;
  metrics::GaugeFamily& slot_memory_;
  metrics::GaugeFamily& slot_healthy_;
  struct SlotCounters {
    metrics::Counter* samples;
    metrics::Counter* busy_seconds;
    metrics::Gauge* memory_in_use;
    metrics::Gauge* memory_cached;
    metrics::Gauge* healthy;
  };
  SlotCounters CountersFor(const Replica& replica);
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_SERVER_METRICS_H_
