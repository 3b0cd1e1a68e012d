#ifndef REPLICAD_SERVER_SERVER_METRICS_H_
#define REPLICAD_SERVER_SERVER_METRICS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device_map.h"
#include "core/metrics/registry.h"
#include "core/serve/model_statistics.h"
#include "core/serve/replica_set.h"
#include "core/serve/scheduler.h"
#include "core/serve/serving_core.h"
#include "core/train/data_parallel_trainer.h"
#include "server/pipeline_metrics.h"

namespace replicad {

// The daemon's metrics, all under replicad_*:
//   requests_total{model,method,code}             counter
//   request_duration_seconds{model,method}        histogram
//   samples_total{model}                          counter (rows predicted)
//   request_queue_seconds{model}                  histograms of a successful request's
//   request_compute_input_seconds{model}            phases (RequestTimes: the numbers
//   request_compute_infer_seconds{model}            Triton's ModelStatistics reports), 10 us
//   request_compute_output_seconds{model}           to 10 s
//   batch_size{model}                             histogram, rows per batch run (1..1024)
//   batches_total{model}                          counter (batches run)
//   batched_requests_total{model}                 counter (requests fused into them)
//   pending_requests{model}                       gauge (requests queued)
//   refused_requests_total{model,reason}          counter; answered without running, reason
//                                                 queue_full, queue_bytes, timeout, deadline,
//                                                 cancelled or stopping (each at 0 from the
//                                                 model's first scheduler event)
//   slot_rows_per_second{model,slot,device}       gauge; the slot's measured speed at the
//                                                 slice size it last ran
//   slot_share{model,slot,device}                 gauge; its fraction of the last split's rows
//   slot_samples_total{model,slot,device}         counter
//   slot_busy_seconds_total{model,slot,device}    counter (time in kernels); its
//                                                 rate(...[1m]) is the slot's utilisation
//   slot_plans_built_total{model,slot,device}     counters: plans built for slice sizes the
//   slot_plan_build_seconds_total{...}              slot's cache lacked, and their time
//   device_slots{device}                          gauge
//   train_steps_total{model}                      counter
//   train_samples_total{model}                    counter
//   train_loss{model}, train_accuracy{model}      gauges (the last step's)
//   train_loss_scale{model}                       gauge; fp16 training: the loss scale of
//                                                 the last step (skipped ones included)
//   train_seconds_total{model,slot,phase}         counter; phase forward and backward per
//                                                 slot, reduce, optimizer and queue with
//                                                 slot "all"
//   train_reduced_bytes_total{model}              counter (gradient bytes reduced)
//   train_steps_not_applied_total{model,outcome,code}  counter; outcome refused (answered
//                                                 with the error `code`, e.g.
//                                                 INVALID_ARGUMENT for NaN inputs) or skipped
//                                                 (a non-finite loss or gradient, code OK)
//   train_checkpoints_total{model,outcome}        counter; periodic checkpoints written or
//                                                 failed
//   slot_memory_bytes{model,slot,device,state}    gauge; device memory of a slot's pool,
//                                                 state in_use or cached (0 on CPU slots)
//   slot_plan_memory_bytes{model,slot,device}     gauge; memory the slot's cached plans hold
//                                                 (at most --plan-memory-per-slot)
//   slot_healthy{model,slot,device}               gauge; 0 once the slot's device failed for
//                                                 good (it then gets no more slices)
//   model_precision{model,precision}              gauge; 1 for what the model's products
//                                                 compute in (fp32, bf16), 0 for the others
//   pipeline_*                                    placed models' pipelines
//                                                 (pipeline_metrics.h)
// `model` is the model's name: its versions share the series (pending_requests shows the
// last version that reported). Series are never removed: an unloaded model's keep their
// last values. The slot gauges are refreshed after every slice the slot runs.
// Thread-safe; the registry must outlive it. The per-request and per-batch paths take
// one reader lock to find their model's cached series, not the families' locks.
class ServerMetrics : public SliceObserver, public ServingObserver, public SchedulerObserver {
 public:
  explicit ServerMetrics(metrics::Registry& registry);

  void RecordRequest(const std::string& model, const std::string& method,
                     const absl::Status& status, double seconds);
  void AddDeviceSlot(const std::string& device);
  // Shows a newly loaded replica's slot series (healthy) before it runs.
  void AddReplica(const Replica& replica);
  // Shows a newly loaded model's series whose label sets are known at load at
  // 0: its per-model counters and histograms, every refusal reason, and for a
  // model that can be trained the training counters with each outcome (steps
  // skipped, refused with the codes a step's checks give, checkpoints
  // written or failed). Alerts read them with increase(), which misses the
  // first event of a series that appears with it.
  void AddModel(const LoadedModel& model);

  void OnSliceRun(const Replica& replica, int64_t rows, double busy_seconds) override;
  void OnPlansBuilt(const Replica& replica, int count, double seconds) override;
  // What placed models' pipelines report to (pipeline_metrics.h).
  PipelineObserver* pipelines() { return &pipelines_; }

  // ServingObserver: samples and phase times of a successful request, and the
  // training series.
  void OnInferred(const LoadedModel& model, int64_t rows, const RequestTimes& times) override;
  void OnTrainStep(const LoadedModel& model, const DataParallelTrainer::StepResult& step,
                   absl::Duration queued) override;
  void OnTrainStepRefused(const LoadedModel& model, const absl::Status& status) override;

  // SchedulerObserver. A reason outside the list above still counts, under its own label.
  void OnBatch(const std::string& model, int64_t rows, int requests) override;
  void OnRefused(const std::string& model, const char* reason) override;
  void OnPending(const std::string& model, size_t pending) override;
  void OnSlotSpeed(const std::string& model, const std::string& slot, const std::string& device,
                   double rows_per_second, double share) override;

 private:
  metrics::CounterFamily& requests_;
  metrics::HistogramFamily& request_duration_;
  metrics::CounterFamily& samples_;
  metrics::HistogramFamily& request_queue_;
  metrics::HistogramFamily& request_compute_input_;
  metrics::HistogramFamily& request_compute_infer_;
  metrics::HistogramFamily& request_compute_output_;
  metrics::HistogramFamily& batch_size_;
  metrics::CounterFamily& batches_;
  metrics::CounterFamily& batched_requests_;
  metrics::GaugeFamily& pending_requests_;
  metrics::CounterFamily& refused_requests_;
  metrics::GaugeFamily& slot_rows_per_second_;
  metrics::GaugeFamily& slot_share_;
  metrics::CounterFamily& slot_samples_;
  PipelineMetrics pipelines_;
  metrics::CounterFamily& slot_busy_;
  metrics::CounterFamily& slot_plans_built_;
  metrics::CounterFamily& slot_plan_build_seconds_;
  metrics::GaugeFamily& device_slots_;
  metrics::CounterFamily& train_steps_;
  metrics::CounterFamily& train_samples_;
  metrics::GaugeFamily& train_loss_;
  metrics::GaugeFamily& train_loss_scale_;
  metrics::GaugeFamily& train_accuracy_;
  metrics::CounterFamily& train_seconds_;
  metrics::CounterFamily& train_reduced_bytes_;
  metrics::CounterFamily& train_not_applied_;
  metrics::CounterFamily& train_checkpoints_;
  metrics::GaugeFamily& slot_memory_;
  metrics::GaugeFamily& slot_plan_memory_;
  metrics::GaugeFamily& slot_healthy_;
  metrics::GaugeFamily& model_precision_;
  struct SlotCounters {
    metrics::Counter* samples;
    metrics::Counter* busy_seconds;
    metrics::Counter* plans_built;
    metrics::Counter* plan_build_seconds;
    metrics::Gauge* memory_in_use;
    metrics::Gauge* memory_cached;
    metrics::Gauge* plan_memory;
    metrics::Gauge* healthy;
  };
  SlotCounters CountersFor(const Replica& replica);

  // The reasons SchedulerObserver::OnRefused names.
  static constexpr std::array<const char*, 6> kRefusalReasons = {
      "queue_full", "queue_bytes", "timeout", "deadline", "cancelled", "stopping"};
  // One model's series, made on its first event; immutable after, so read
  // without the lock.
  struct ModelSeries {
    metrics::Counter* samples;
    metrics::Histogram* queue;
    metrics::Histogram* compute_input;
    metrics::Histogram* compute_infer;
    metrics::Histogram* compute_output;
    metrics::Histogram* batch_size;
    metrics::Counter* batches;
    metrics::Counter* batched_requests;
    metrics::Gauge* pending;
    std::array<metrics::Counter*, kRefusalReasons.size()> refused;  // kRefusalReasons order.
  };
  const ModelSeries& SeriesFor(const std::string& model) ABSL_LOCKS_EXCLUDED(mu_);
  struct SlotSpeedSeries {
    metrics::Gauge* rows_per_second;
    metrics::Gauge* share;
  };

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<const ModelSeries>> models_ ABSL_GUARDED_BY(mu_);
  // By model, slot and device.
  absl::flat_hash_map<std::tuple<std::string, std::string, std::string>, SlotSpeedSeries>
      slot_speeds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_SERVER_METRICS_H_
