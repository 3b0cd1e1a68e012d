// With a GPU and its driver (CTest label gpu): NVML loads and every GPU
// reports memory and a utilization in [0, 1]. Skips where NVML is absent.
#include <string>

#include "core/device/gpu_telemetry.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(GpuTelemetryGpuTest, EveryGpuReports) {
  absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry = GpuTelemetry::Load();
  if (!telemetry.ok()) GTEST_SKIP() << telemetry.status();
  absl::StatusOr<std::vector<GpuReading>> readings = (*telemetry)->Read();
  ASSERT_TRUE(readings.ok()) << readings.status();
  ASSERT_FALSE(readings->empty());
  for (const GpuReading& r : *readings) {
    EXPECT_GT(r.memory_total_bytes, 0u) << "gpu " << r.index;
    EXPECT_LE(r.memory_used_bytes, r.memory_total_bytes) << "gpu " << r.index;
    EXPECT_GE(r.utilization, 0.0);
    EXPECT_LE(r.utilization, 1.0);
    EXPECT_GT(r.temperature_celsius, 0.0) << "gpu " << r.index;
  }
}

}  // namespace
}  // namespace replicad
