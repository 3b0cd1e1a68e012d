#include "core/backends/backends.h"

#include <omp.h>

#include "core/backends/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

// Enumeration never fails for lack of a GPU or a driver: on a build machine
// with the CUDA toolkit but no driver it lists the CPUs only.
TEST(BackendsTest, EnumerationListsEveryCoreAsACpuDevice) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  std::vector<DeviceInfo> cpus = EnumerateCpuDevices();
  ASSERT_GE(cpus.size(), 1u);
  for (size_t i = 0; i < cpus.size(); ++i) {
    EXPECT_EQ((*devices)[i].id, (DeviceId{DeviceKind::kCpu, static_cast<int>(i)}));
    EXPECT_GT((*devices)[i].memory_bytes, 0u);
    EXPECT_FALSE((*devices)[i].name.empty());
    EXPECT_TRUE((*devices)[i].compute_capability.empty());
  }
  for (size_t i = cpus.size(); i < devices->size(); ++i) {
    EXPECT_EQ((*devices)[i].id.kind, DeviceKind::kCuda);
    EXPECT_FALSE((*devices)[i].compute_capability.empty());
  }
}

TEST(BackendsTest, DefaultSlotsTileTheCores) {
  std::vector<DeviceInfo> four;
  for (int i = 0; i < 4; ++i) {
    four.push_back(DeviceInfo{{DeviceKind::kCpu, i}, "cpu", 1, "", "", ""});
  }
  EXPECT_EQ(DefaultSlots(four, 1).size(), 4u);
  std::vector<DeviceId> two_wide = DefaultSlots(four, 2);
  ASSERT_EQ(two_wide.size(), 2u);
  EXPECT_EQ(two_wide[1], (DeviceId{DeviceKind::kCpu, 2}));
  EXPECT_EQ(DefaultSlots(four, 3).size(), 1u);
  EXPECT_EQ(DefaultSlots(four, 16), (std::vector<DeviceId>{{DeviceKind::kCpu, 0}}));
}

TEST(BackendsTest, CpuSlotRunsWithItsOwnThreadCount) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  for (int threads : {1, 3}) {
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(cpu, SlotOptions{threads});
    ASSERT_TRUE(device.ok());
    int seen = 0;
    (*device)->Enqueue([&] { seen = omp_get_max_threads(); });
    ASSERT_TRUE((*device)->Synchronize().ok());
    EXPECT_EQ(seen, threads);
  }
}

TEST(BackendsTest, CpuDeviceCountsAllocationsAndCopiesInStreamOrder) {
  std::unique_ptr<Device> device = CreateCpuDevice(EnumerateCpuDevices()[0], CpuSlotOptions{1});
  const uint64_t before = device->allocation_count();
  absl::StatusOr<std::shared_ptr<Buffer>> a = device->Allocate(16);
  absl::StatusOr<std::shared_ptr<Buffer>> b = device->Allocate(16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(device->allocation_count(), before + 2);
  const float values[4] = {1, 2, 3, 4};
  device->EnqueueCopy(values, MemoryLocation{}, (*a)->data(), device->memory_location(), 16);
  device->EnqueueCopy((*a)->data(), device->memory_location(), (*b)->data(),
                      device->memory_location(), 16);
  ASSERT_TRUE(device->Synchronize().ok());
  EXPECT_EQ(static_cast<float*>((*b)->data())[3], 4.0f);
}

TEST(BackendsTest, DefaultSlotsAreOnePerGpuWhenThereAreGpus) {
  std::vector<DeviceInfo> devices = {DeviceInfo{{DeviceKind::kCpu, 0}, "cpu", 1, "", "", ""},
                                     DeviceInfo{{DeviceKind::kCpu, 1}, "cpu", 1, "", "", ""},
                                     DeviceInfo{{DeviceKind::kCuda, 0}, "gpu", 1, "9.0", "", ""},
                                     DeviceInfo{{DeviceKind::kCuda, 1}, "gpu", 1, "9.0", "", ""}};
  EXPECT_EQ(DefaultSlots(devices, 1),
            (std::vector<DeviceId>{{DeviceKind::kCuda, 0}, {DeviceKind::kCuda, 1}}));
}

// No machine has a 100th GPU: with the CUDA backend the runtime refuses it,
// without it the build does; either way the error names the device.
TEST(BackendsTest, ASlotOnAMissingGpuFailsNamingIt) {
  absl::StatusOr<std::unique_ptr<Device>> device =
      CreateDevice(DeviceInfo{{DeviceKind::kCuda, 99}, "gpu", 1, "9.0", "", ""}, SlotOptions{});
  ASSERT_FALSE(device.ok());
  EXPECT_THAT(device.status().message(), HasSubstr("cuda:99"));
}

}  // namespace
}  // namespace replicad
