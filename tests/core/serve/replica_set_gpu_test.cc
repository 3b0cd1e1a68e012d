// Split, run and merge on CUDA slots: the served path (Replica::RunOnHost
// staging, the plans' device buffers, the caching allocator) against the
// same model on one CPU slot. Float32 without TF32 on both sides; they differ
// in summation order only: relative L2 <= 1e-5 per output. Skips without a
// GPU (CTest label gpu).

#include <cstring>
#include <memory>
#include <vector>

#include "core/backends/backends.h"
#include "core/model/default_model.h"
#include "core/serve/replica_set.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr double kMaxRelativeL2 = 1e-5;

const DeviceInfo* FindGpu(const std::vector<DeviceInfo>& devices) {
  for (const DeviceInfo& d : devices) {
    if (d.id.kind == DeviceKind::kCuda) return &d;
  }
  return nullptr;
}

class ReplicaSetGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    devices_ = *std::move(devices);
    gpu_ = FindGpu(devices_);
    if (gpu_ == nullptr) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::shared_ptr<const Model>> model = LoadDefaultModel();
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  // `slots` slots on the first GPU, equal weights, merged on the CPU.
  std::unique_ptr<ReplicaSet> GpuSet(int slots) {
    std::vector<std::unique_ptr<Replica>> replicas;
    for (int i = 0; i < slots; ++i) {
      absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*gpu_, SlotOptions{});
      EXPECT_TRUE(device.ok()) << device.status();
      if (!device.ok()) return nullptr;
      absl::StatusOr<std::unique_ptr<Replica>> replica = Replica::Create(
          model_, SlotAssignment{"g" + std::to_string(i), gpu_->id, 1}, *std::move(device));
      EXPECT_TRUE(replica.ok()) << replica.status();
      if (!replica.ok()) return nullptr;
      replicas.push_back(*std::move(replica));
    }
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
        ReplicaSet::Create(model_, std::move(replicas), ReplicaSet::Options{DeviceId{}});
    EXPECT_TRUE(set.ok()) << set.status();
    return set.ok() ? *std::move(set) : nullptr;
  }

  std::vector<Tensor> Images(int64_t batch) {
    return {testing::RandomTensor({batch, 1, 28, 28}, 7)};
  }

  std::vector<DeviceInfo> devices_;
  const DeviceInfo* gpu_ = nullptr;
  std::shared_ptr<const Model> model_;
};

TEST_F(ReplicaSetGpuTest, SplitOverTwoSlotsOfOneGpuMatchesTheCpu) {
  std::unique_ptr<ReplicaSet> gpu = GpuSet(2);
  ASSERT_NE(gpu, nullptr);
  std::unique_ptr<ReplicaSet> cpu = testing::MakeCpuReplicaSet(model_, {1});
  for (int64_t batch : {7, 1, 64}) {
    SCOPED_TRACE(batch);
    testing::PredictOutcome expected = testing::PredictAndWait(*cpu, Images(batch));
    ASSERT_TRUE(expected.status.ok()) << expected.status;
    testing::PredictOutcome actual = testing::PredictAndWait(*gpu, Images(batch));
    ASSERT_TRUE(actual.status.ok()) << actual.status;
    EXPECT_EQ(actual.slices.size(), batch == 1 ? 1u : 2u);
    ASSERT_EQ(actual.outputs.size(), expected.outputs.size());
    for (size_t o = 0; o < expected.outputs.size(); ++o) {
      EXPECT_LE(testing::RelativeL2(actual.outputs[o], expected.outputs[o]), kMaxRelativeL2);
    }
  }
}

TEST_F(ReplicaSetGpuTest, RepeatedRequestsAllocateNoDeviceMemory) {
  std::unique_ptr<ReplicaSet> gpu = GpuSet(2);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(testing::PredictAndWait(*gpu, Images(32)).status.ok());
  std::vector<uint64_t> before;
  for (const auto& r : gpu->replicas()) before.push_back(r->device().allocation_count());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(testing::PredictAndWait(*gpu, Images(32)).status.ok());
  for (size_t r = 0; r < before.size(); ++r) {
    EXPECT_EQ(gpu->replicas()[r]->device().allocation_count(), before[r]);
    EXPECT_GT(gpu->replicas()[r]->device().memory_in_use_bytes(), 0u);
  }
}

// Copies larger than the staging chunks, both ways and within the device.
TEST_F(ReplicaSetGpuTest, StagedCopiesRoundTripInStreamOrder) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*gpu_, SlotOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  const size_t bytes = (size_t{20} << 20) + 12;
  std::vector<char> source(bytes);
  for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<char>(i * 131 + 7);
  std::vector<char> back(bytes, 0);
  absl::StatusOr<std::shared_ptr<Buffer>> a = (*device)->Allocate(bytes);
  absl::StatusOr<std::shared_ptr<Buffer>> b = (*device)->Allocate(bytes);
  ASSERT_TRUE(a.ok() && b.ok());
  const MemoryLocation host{};
  const MemoryLocation gpu = (*device)->memory_location();
  (*device)->EnqueueCopy(source.data(), host, (*a)->data(), gpu, bytes);
  (*device)->EnqueueCopy((*a)->data(), gpu, (*b)->data(), gpu, bytes);
  (*device)->EnqueueCopy((*b)->data(), gpu, back.data(), host, bytes);
  std::shared_ptr<Event> done = (*device)->RecordEvent();
  done->Wait();
  EXPECT_TRUE(done->IsReady());
  ASSERT_TRUE((*device)->Synchronize().ok());
  EXPECT_EQ(std::memcmp(source.data(), back.data(), bytes), 0);
  EXPECT_TRUE((*device)->health().ok());
}

}  // namespace
}  // namespace replicad
