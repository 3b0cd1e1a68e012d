#include "server/gpu_metrics.h"

#include <string>

#include "core/base/status_macros.h"

namespace replicad {

GpuMetrics::GpuMetrics(metrics::Registry& registry, std::unique_ptr<GpuTelemetry> telemetry,
                       absl::Duration period)
    : telemetry_(std::move(telemetry)),
      utilization_(registry.AddGauge("replicad_gpu_utilization_ratio",
                                     "Share of the last sample period a kernel ran on the GPU.",
                                     {"gpu"})),
      memory_used_(registry.AddGauge("replicad_gpu_memory_used_bytes",
                                     "GPU memory in use by every process.", {"gpu"})),
      memory_total_(
          registry.AddGauge("replicad_gpu_memory_total_bytes", "GPU memory in all.", {"gpu"})),
      power_(registry.AddGauge("replicad_gpu_power_watts", "GPU board power draw.", {"gpu"})),
      temperature_(
          registry.AddGauge("replicad_gpu_temperature_celsius", "GPU core temperature.", {"gpu"})) {
  (void)Refresh();
  refresher_ = std::thread([this, period] {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
      mu_.Unlock();
      (void)Refresh();  // A failed read keeps the last values; the next may succeed.
      mu_.Lock();
    }
  });
}

GpuMetrics::~GpuMetrics() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  refresher_.join();
}

absl::Status GpuMetrics::Refresh() {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<GpuReading> readings, telemetry_->Read());
  for (const GpuReading& r : readings) {
    const std::vector<std::string> gpu = {std::to_string(r.index)};
    utilization_.WithLabels(gpu).Set(r.utilization);
    memory_used_.WithLabels(gpu).Set(static_cast<double>(r.memory_used_bytes));
    memory_total_.WithLabels(gpu).Set(static_cast<double>(r.memory_total_bytes));
    power_.WithLabels(gpu).Set(r.power_watts);
    temperature_.WithLabels(gpu).Set(r.temperature_celsius);
  }
  return absl::OkStatus();
}

}  // namespace replicad
