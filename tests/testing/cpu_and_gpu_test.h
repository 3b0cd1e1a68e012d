#ifndef REPLICAD_TESTS_TESTING_CPU_AND_GPU_TEST_H_
#define REPLICAD_TESTS_TESTING_CPU_AND_GPU_TEST_H_

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backends/backends.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_runner.h"

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

  // Runs `call` on both slots: the float32 outputs agree within
  // `tolerance` * (1 + |cpu|) per element (NaN where the CPU has NaN), the
  // others exactly; `what` names the case in failures.
  void ExpectKernelMatchesCpu(const KernelCall& call, const std::string& what,
                              double tolerance = 1e-4) {
    absl::StatusOr<std::vector<Tensor>> cpu = RunKernel(*cpu_, call);
    ASSERT_TRUE(cpu.ok()) << what << ": " << cpu.status();
    absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
    ASSERT_TRUE(gpu.ok()) << what << ": " << gpu.status();
    ASSERT_EQ(gpu->size(), cpu->size()) << what;
    for (size_t o = 0; o < cpu->size(); ++o) {
      const Tensor& a = (*gpu)[o];
      const Tensor& e = (*cpu)[o];
      ASSERT_EQ(TensorTypeToString(a.type()), TensorTypeToString(e.type())) << what;
      if (e.dtype() != DType::kFloat32) {
        EXPECT_EQ(std::memcmp(a.raw_data(), e.raw_data(), e.byte_size()), 0) << what;
        continue;
      }
      int reported = 0;
      for (int64_t i = 0; i < e.num_elements() && reported < 5; ++i) {
        const double x = a.data<float>()[i], y = e.data<float>()[i];
        if (x == y || (std::isnan(y) && std::isnan(x))) continue;  // Equal infinities too.
        if (!(std::fabs(x - y) <= tolerance * (1 + std::fabs(y)))) {
          ADD_FAILURE() << what << ", output " << o << ", element " << i << ": " << x << " vs cpu "
                        << y;
          ++reported;
        }
      }
    }
  }

  std::unique_ptr<Device> cpu_, gpu_;
};

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_CPU_AND_GPU_TEST_H_
