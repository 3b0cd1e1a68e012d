#ifndef REPLICAD_SERVER_GPU_METRICS_H_
#define REPLICAD_SERVER_GPU_METRICS_H_

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/device/gpu_telemetry.h"
#include "core/metrics/registry.h"

namespace replicad {

// The GPUs' telemetry as gauges, refreshed by a thread of its own every
// `period` (Prometheus scrapes read the last values):
//   replicad_gpu_utilization_ratio{gpu}      0..1
//   replicad_gpu_memory_used_bytes{gpu}      by every process
//   replicad_gpu_memory_total_bytes{gpu}
//   replicad_gpu_power_watts{gpu}
//   replicad_gpu_temperature_celsius{gpu}
// The registry must outlive it; the destructor stops the thread.
class GpuMetrics {
 public:
  GpuMetrics(metrics::Registry& registry, std::unique_ptr<GpuTelemetry> telemetry,
             absl::Duration period);
  ~GpuMetrics();

  // Reads every GPU once and sets the gauges (the thread calls it too).
  absl::Status Refresh();

 private:
  std::unique_ptr<GpuTelemetry> telemetry_;
  metrics::GaugeFamily& utilization_;
  metrics::GaugeFamily& memory_used_;
  metrics::GaugeFamily& memory_total_;
  metrics::GaugeFamily& power_;
  metrics::GaugeFamily& temperature_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread refresher_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_GPU_METRICS_H_
