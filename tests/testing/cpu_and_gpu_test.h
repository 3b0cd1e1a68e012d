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
    std::vector<Tensor> cpu, gpu;
    if (!RunOnBoth(call, what, &cpu, &gpu)) return;
    for (size_t o = 0; o < cpu.size(); ++o) {
      const Tensor& a = gpu[o];
      const Tensor& e = cpu[o];
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

  // `bad` fails on both slots with InvalidArgument and one message holding
  // `expected`; `good` (the same op) still gives the CPU's bytes afterwards.
  void ExpectRefusedAlike(const KernelCall& bad, const KernelCall& good,
                          const std::string& expected) {
    absl::StatusOr<std::vector<Tensor>> cpu = RunKernel(*cpu_, bad);
    absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, bad);
    ASSERT_FALSE(cpu.ok());
    ASSERT_FALSE(gpu.ok());
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument) << cpu.status();
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument) << gpu.status();
    EXPECT_EQ(gpu.status().message(), cpu.status().message());
    EXPECT_NE(gpu.status().message().find(expected), std::string::npos) << gpu.status();
    ExpectKernelBytesMatchCpu(good, bad.op_type + " after a refused run");
  }

  // Runs `call` on both slots: every output element on the GPU holds the
  // CPU's bytes (NaN payloads and the sign of zero included).
  void ExpectKernelBytesMatchCpu(const KernelCall& call, const std::string& what) {
    ExpectKernelBytesMatchCpu(call, call, what);
  }
  // The same, with the GPU running `gpu_call` and the CPU `cpu_call` (the
  // same op and inputs, told apart in what the builders see as known, so
  // that each backend takes the form under test).
  void ExpectKernelBytesMatchCpu(const KernelCall& gpu_call, const KernelCall& cpu_call,
                                 const std::string& what) {
    std::vector<Tensor> cpu, gpu;
    if (!RunOnBoth(gpu_call, cpu_call, what, &cpu, &gpu)) return;
    for (size_t o = 0; o < cpu.size(); ++o) {
      const size_t element = DTypeSize(cpu[o].dtype());
      const char* got = static_cast<const char*>(gpu[o].raw_data());
      const char* want = static_cast<const char*>(cpu[o].raw_data());
      int reported = 0;
      for (int64_t i = 0; i < cpu[o].num_elements() && reported < 5; ++i) {
        if (std::memcmp(got + i * element, want + i * element, element) != 0) {
          ADD_FAILURE() << what << ", output " << o << ": element " << i << " differs";
          ++reported;
        }
      }
    }
  }

  std::unique_ptr<Device> cpu_, gpu_;

 private:
  // `call` on both slots into `cpu` and `gpu`; false, with a failure, when a
  // run fails or the two give different numbers or types of outputs.
  bool RunOnBoth(const KernelCall& call, const std::string& what, std::vector<Tensor>* cpu,
                 std::vector<Tensor>* gpu) {
    return RunOnBoth(call, call, what, cpu, gpu);
  }
  bool RunOnBoth(const KernelCall& gpu_call, const KernelCall& cpu_call, const std::string& what,
                 std::vector<Tensor>* cpu, std::vector<Tensor>* gpu) {
    absl::StatusOr<std::vector<Tensor>> on_cpu = RunKernel(*cpu_, cpu_call);
    absl::StatusOr<std::vector<Tensor>> on_gpu = RunKernel(*gpu_, gpu_call);
    if (!on_cpu.ok() || !on_gpu.ok()) {
      ADD_FAILURE() << what << ": cpu " << on_cpu.status() << ", gpu " << on_gpu.status();
      return false;
    }
    if (on_gpu->size() != on_cpu->size()) {
      ADD_FAILURE() << what << ": " << on_gpu->size() << " outputs vs cpu " << on_cpu->size();
      return false;
    }
    for (size_t o = 0; o < on_cpu->size(); ++o) {
      const std::string got = TensorTypeToString((*on_gpu)[o].type());
      const std::string want = TensorTypeToString((*on_cpu)[o].type());
      if (got != want) {
        ADD_FAILURE() << what << ", output " << o << ": " << got << " vs cpu " << want;
        return false;
      }
    }
    *cpu = *std::move(on_cpu);
    *gpu = *std::move(on_gpu);
    return true;
  }
};

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_CPU_AND_GPU_TEST_H_
