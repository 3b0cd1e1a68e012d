// CUDA device enumeration (CTest label gpu): with a GPU, every device the runtime reports is listed
// with its name, memory and compute capability; without one, or without a driver, the list is empty
// and that is not an error.

#include "core/backends/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

// On a GPU machine the runtime's devices are listed with name, memory and
// compute capability; without one (or without a driver) the list is empty
// and that is not an error.
TEST(CudaEnumerationTest, ListsGpusWithTheirPropertiesOrNoneWithoutError) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateCudaDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty()) GTEST_SKIP() << "no CUDA device on this machine";
  for (size_t i = 0; i < devices->size(); ++i) {
    const DeviceInfo& d = (*devices)[i];
    EXPECT_EQ(d.id, (DeviceId{DeviceKind::kCuda, static_cast<int>(i)}));
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.memory_bytes, 1ull << 30);
    EXPECT_NE(d.compute_capability.find('.'), std::string::npos);
  }
}

}  // namespace
}  // namespace replicad
