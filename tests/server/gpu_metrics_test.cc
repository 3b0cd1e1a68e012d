// GPU gauges from NVML (CTest label gpu; skips where NVML is absent): after
// construction every GPU has its five gauges, and the thread stops cleanly.
#include "server/gpu_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(GpuMetricsTest, EveryGpuHasItsGauges) {
  absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry = GpuTelemetry::Load();
  if (!telemetry.ok()) GTEST_SKIP() << telemetry.status();
  metrics::Registry registry;
  {
    GpuMetrics gpu(registry, *std::move(telemetry), absl::Milliseconds(20));
    ASSERT_TRUE(gpu.Refresh().ok());
    EXPECT_THAT(registry.Render(), AllOf(HasSubstr("replicad_gpu_utilization_ratio{gpu=\"0\"}"),
                                         HasSubstr("replicad_gpu_memory_used_bytes{gpu=\"0\"}"),
                                         HasSubstr("replicad_gpu_memory_total_bytes{gpu=\"0\"}"),
                                         HasSubstr("replicad_gpu_power_watts{gpu=\"0\"}"),
                                         HasSubstr("replicad_gpu_temperature_celsius{gpu=\"0\"}")));
  }  // The refresher thread stops here.
}

}  // namespace
}  // namespace replicad
