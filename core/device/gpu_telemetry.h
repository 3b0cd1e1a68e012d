#ifndef REPLICAD_CORE_DEVICE_GPU_TELEMETRY_H_
#define REPLICAD_CORE_DEVICE_GPU_TELEMETRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace replicad {

// One GPU's state as the driver reports it.
struct GpuReading {
  int index = 0;                   // NVML's index (the CUDA ordinal on most machines).
  double utilization = 0;          // Share of the last sample period a kernel ran, 0..1.
  uint64_t memory_used_bytes = 0;  // By every process, not only replicad.
  uint64_t memory_total_bytes = 0;
  double power_watts = 0;
  double temperature_celsius = 0;
};

// The GPUs' utilization, memory, power and temperature through NVML, which
// is loaded at run time (dlopen of libnvidia-ml.so.1, the driver's library),
// so replicad needs neither NVML nor a GPU to build or run. Thread-safe.
class GpuTelemetry {
 public:
  // NVML from `library`; Unavailable naming the library and dlopen's or
  // NVML's reason where it cannot be loaded or initialised (no driver).
  static absl::StatusOr<std::unique_ptr<GpuTelemetry>> Load(
      const std::string& library = "libnvidia-ml.so.1");
  ~GpuTelemetry();

  // Every GPU NVML sees. A value a GPU does not report (power on some
  // boards) stays 0. Internal naming the NVML call when one fails.
  absl::StatusOr<std::vector<GpuReading>> Read() const;

 private:
  struct Api;
  explicit GpuTelemetry(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_GPU_TELEMETRY_H_
