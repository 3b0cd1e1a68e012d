// Split, run and merge on CUDA slots: the served path (Replica::RunOnHost
// staging, the plans' device buffers, the caching allocator) against the
// same model on one CPU slot. Float32 without TF32 on both sides; they differ
// in summation order only: relative L2 <= 1e-5 per output. Skips without a
// GPU (CTest label gpu).
//
// Batches 1, 7 and 64 over two slots of one GPU, also cut into 4 chunks and merged in cuda:0's
// memory; repeated requests allocate no device memory; staged copies larger than the staging
// buffers round-trip; copies on the lanes follow their marks.

#include <cstring>
#include <memory>
#include <vector>

#include "core/backends/backends.h"
#include "core/base/status_macros.h"
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

  // `slots` slots on the first GPU, equal weights, merged on the CPU unless
  // `options` say otherwise.
  std::unique_ptr<ReplicaSet> GpuSet(int slots, ReplicaSet::Options options = {},
                                     SlotOptions slot_options = {}) {
    std::vector<std::unique_ptr<Replica>> replicas;
    for (int i = 0; i < slots; ++i) {
      absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*gpu_, slot_options);
      EXPECT_TRUE(device.ok()) << device.status();
      if (!device.ok()) return nullptr;
      absl::StatusOr<std::unique_ptr<Replica>> replica = Replica::Create(
          model_, SlotAssignment{"g" + std::to_string(i), gpu_->id, 1}, *std::move(device));
      EXPECT_TRUE(replica.ok()) << replica.status();
      if (!replica.ok()) return nullptr;
      replicas.push_back(*std::move(replica));
    }
    std::unique_ptr<Device> merge_stream;
    if (options.merge_device.kind == DeviceKind::kCuda) {
      absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*gpu_, SlotOptions{});
      EXPECT_TRUE(device.ok()) << device.status();
      if (!device.ok()) return nullptr;
      merge_stream = *std::move(device);
    }
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
        ReplicaSet::Create(model_, std::move(replicas), options, std::move(merge_stream));
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

// --cuda-graphs: a plan's run recorded on its second run and replayed after
// gives what the same slot gives without graphs, bit for bit, for every
// request (batches 1 and 3, six requests each, in 4 chunks too: two buffer
// sets per plan), and one CPU slot's within the tolerance.
TEST_F(ReplicaSetGpuTest, CudaGraphsAnswerAsPlainRuns) {
  std::unique_ptr<ReplicaSet> cpu = testing::MakeCpuReplicaSet(model_, {1});
  for (int chunks : {1, 4}) {
    ReplicaSet::Options options;
    options.transfer_chunks = chunks;
    options.min_chunk_bytes = 1;
    SlotOptions graphs;
    graphs.cuda_graphs = true;
    std::unique_ptr<ReplicaSet> plain = GpuSet(1, options);
    std::unique_ptr<ReplicaSet> recorded = GpuSet(1, options, graphs);
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(recorded, nullptr);
    for (int64_t batch : {1, 3}) {
      for (int request = 0; request < 6; ++request) {
        SCOPED_TRACE(::testing::Message()
                     << chunks << " chunks, batch " << batch << ", request " << request);
        const std::vector<Tensor> images = {
            testing::RandomTensor({batch, 1, 28, 28}, 100 + request)};
        testing::PredictOutcome want = testing::PredictAndWait(*plain, images);
        testing::PredictOutcome got = testing::PredictAndWait(*recorded, images);
        testing::PredictOutcome host = testing::PredictAndWait(*cpu, images);
        ASSERT_TRUE(want.status.ok() && got.status.ok() && host.status.ok()) << got.status;
        for (size_t o = 0; o < want.outputs.size(); ++o) {
          EXPECT_EQ(std::memcmp(got.outputs[o].raw_data(), want.outputs[o].raw_data(),
                                want.outputs[o].byte_size()),
                    0)
              << "output " << o;
          EXPECT_LE(testing::RelativeL2(got.outputs[o], host.outputs[o]), kMaxRelativeL2);
        }
      }
    }
  }
}

// Slices cut into chunks whose copies run on the copy lanes, merged in host
// memory or in the GPU's memory (the peer-copy path of --merge-device).
TEST_F(ReplicaSetGpuTest, ChunkedSlicesAndGpuMergeMatchTheCpu) {
  std::unique_ptr<ReplicaSet> cpu = testing::MakeCpuReplicaSet(model_, {1});
  for (int chunks : {1, 4}) {
    for (bool merge_on_gpu : {false, true}) {
      SCOPED_TRACE(::testing::Message() << chunks << " chunks, merge on gpu " << merge_on_gpu);
      ReplicaSet::Options options;
      options.transfer_chunks = chunks;
      options.min_chunk_bytes = 1;
      if (merge_on_gpu) options.merge_device = gpu_->id;
      std::unique_ptr<ReplicaSet> gpu = GpuSet(2, options);
      ASSERT_NE(gpu, nullptr);
      for (int64_t batch : {1, 7, 64, 101}) {
        SCOPED_TRACE(batch);
        testing::PredictOutcome expected = testing::PredictAndWait(*cpu, Images(batch));
        testing::PredictOutcome actual = testing::PredictAndWait(*gpu, Images(batch));
        ASSERT_TRUE(actual.status.ok()) << actual.status;
        for (size_t o = 0; o < expected.outputs.size(); ++o) {
          EXPECT_LE(testing::RelativeL2(actual.outputs[o], expected.outputs[o]), kMaxRelativeL2);
        }
      }
    }
  }
}

// The lanes are streams of their own, ordered only by marks: an upload, a
// copy on the compute lane after it, a download after that; then uploads
// and downloads alternating through the shared staging buffers.
TEST_F(ReplicaSetGpuTest, LaneCopiesFollowTheirMarks) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*gpu_, SlotOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  Device& d = **device;
  const size_t bytes = (size_t{20} << 20) + 12;
  std::vector<char> source(bytes), back(bytes, 0), again(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<char>(i * 131 + 7);
  absl::StatusOr<std::shared_ptr<Buffer>> a = d.Allocate(bytes);
  absl::StatusOr<std::shared_ptr<Buffer>> b = d.Allocate(bytes);
  ASSERT_TRUE(a.ok() && b.ok());
  const MemoryLocation host{};
  const MemoryLocation gpu = d.memory_location();
  using Lane = Device::Lane;
  absl::Status status;
  d.Enqueue([&] {
    auto step = [&]() -> absl::Status {
      REPLICAD_RETURN_IF_ERROR(
          d.CopyOnLane(Lane::kUpload, source.data(), host, (*a)->data(), gpu, bytes));
      REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Device::LaneMark> uploaded,
                                d.MarkLane(Lane::kUpload));
      REPLICAD_RETURN_IF_ERROR(d.WaitForMark(Lane::kCompute, uploaded.get()));
      REPLICAD_RETURN_IF_ERROR(d.CopyOnStream((*a)->data(), gpu, (*b)->data(), gpu, bytes));
      REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Device::LaneMark> copied,
                                d.MarkLane(Lane::kCompute));
      REPLICAD_RETURN_IF_ERROR(d.WaitForMark(Lane::kDownload, copied.get()));
      REPLICAD_RETURN_IF_ERROR(
          d.CopyOnLane(Lane::kDownload, (*b)->data(), gpu, back.data(), host, bytes));
      // Back-to-back on different lanes through the same staging halves.
      REPLICAD_RETURN_IF_ERROR(
          d.CopyOnLane(Lane::kUpload, back.data(), host, (*a)->data(), gpu, bytes));
      REPLICAD_ASSIGN_OR_RETURN(uploaded, d.MarkLane(Lane::kUpload));
      REPLICAD_RETURN_IF_ERROR(d.WaitForMark(Lane::kDownload, uploaded.get()));
      REPLICAD_RETURN_IF_ERROR(
          d.CopyOnLane(Lane::kDownload, (*a)->data(), gpu, again.data(), host, bytes));
      return d.AwaitStream();
    };
    status = step();
  });
  ASSERT_TRUE(d.Synchronize().ok());
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(std::memcmp(source.data(), back.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(source.data(), again.data(), bytes), 0);
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
