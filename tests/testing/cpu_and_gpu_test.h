#ifndef REPLICAD_TESTS_TESTING_CPU_AND_GPU_TEST_H_
#define REPLICAD_TESTS_TESTING_CPU_AND_GPU_TEST_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backends/backends.h"
#include "gtest/gtest.h"

namespace replicad::testing {

// A fixture for tests that compare a CUDA kernel with the CPU's: a slot on
// cpu:0 and one on cuda:0, each with default options. Skips the test on a
// machine without a CUDA device (the tests carry the CTest label gpu).
class CpuAndGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    const DeviceId cpu_id{DeviceKind::kCpu, 0}, gpu_id{DeviceKind::kCuda, 0};
    if (FindDevice(*devices, gpu_id) == nullptr) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::unique_ptr<Device>> cpu = CreateDevice(*FindDevice(*devices, cpu_id), {});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    absl::StatusOr<std::unique_ptr<Device>> gpu = CreateDevice(*FindDevice(*devices, gpu_id), {});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
  }

  std::unique_ptr<Device> cpu_, gpu_;
};

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_CPU_AND_GPU_TEST_H_
