// Replica::PlanSlice/RunSlice on slots whose memory the host does not read:
// slices cut into chunks whose upload, compute and download overlap, and
// outputs merged in device memory. Runs everywhere on the device-memory
// stand-in (CPU kernels behind device-memory paths, copy lanes on threads of
// their own); replica_set_gpu_test runs the same paths on GPUs. Chunks and
// slices run the same kernels on fewer rows, so results match one CPU slot
// within 1e-6 relative L2 (oneDNN may pick another algorithm per size).
//
// Slices cut into 1 to 7 chunks, merged in host or "device" memory, concurrent requests, rank-0
// outputs and batch-reducing models (which run whole) all match one CPU slot; a missing ordering
// mark gives wrong results, as the lanes run on threads of their own. A slot with a memory limit
// fails a request with RESOURCE_EXHAUSTED naming cuda:0 and still serves smaller ones, or with
// shrink_on_oom runs it in smaller chunks; bad merge configurations are INVALID_ARGUMENT.

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/serve/replica_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/device_memory_stand_in.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::PredictAndWait;
using testing::PredictOutcome;
using testing::RandomTensor;
using testing::RelativeL2;

constexpr double kMaxRelativeL2 = 1e-6;

std::unique_ptr<Replica> StandInReplica(std::shared_ptr<const Model> model, const std::string& name,
                                        size_t memory_limit_bytes = 0,
                                        size_t max_plans = Replica::kDefaultMaxPlans) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::unique_ptr<Device> device = testing::MakeDeviceMemoryStandIn(
      CreateCpuDevice(cpu, CpuSlotOptions{1}), 0, memory_limit_bytes);
  const DeviceId id = device->info().id;
  absl::StatusOr<std::unique_ptr<Replica>> replica = Replica::Create(
      std::move(model), SlotAssignment{name, id, 1.0}, std::move(device), max_plans);
  EXPECT_TRUE(replica.ok()) << replica.status();
  return replica.ok() ? *std::move(replica) : nullptr;
}

// `slots` stand-in slots cutting slices into up to `chunks` chunks of any
// size; merged in host memory, or with `merge_on_device` in a stand-in's.
absl::StatusOr<std::unique_ptr<ReplicaSet>> StandInSet(
    std::shared_ptr<const Model> model, int slots, int chunks, bool merge_on_device,
    size_t max_plans = Replica::kDefaultMaxPlans) {
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < slots; ++i)
    replicas.push_back(StandInReplica(model, "g" + std::to_string(i), 0, max_plans));
  ReplicaSet::Options options;
  options.transfer_chunks = chunks;
  options.min_chunk_bytes = 1;
  std::unique_ptr<Device> merge;
  if (merge_on_device) {
    const DeviceInfo cpu = EnumerateCpuDevices()[0];
    merge = testing::MakeDeviceMemoryStandIn(CreateCpuDevice(cpu, CpuSlotOptions{1}), 0);
    options.merge_device = merge->info().id;
  }
  return ReplicaSet::Create(std::move(model), std::move(replicas), options, std::move(merge));
}

// A set of the one slot `replica`, merged in host memory.
absl::StatusOr<std::unique_ptr<ReplicaSet>> OneSlotSet(std::shared_ptr<const Model> model,
                                                       std::unique_ptr<Replica> replica) {
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(std::move(replica));
  ReplicaSet::Options options;
  options.merge_device = EnumerateCpuDevices()[0].id;
  return ReplicaSet::Create(std::move(model), std::move(replicas), options);
}

class ReplicaChunkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadOrDie(testing::TwoInputTwoOutputOnnx(), "two_in_two_out");
    cpu_ = testing::MakeCpuReplicaSet(model_, {1});
  }
  std::vector<Tensor> Inputs(int64_t batch) {
    return {RandomTensor({batch, 3, 6, 6}, batch), RandomTensor({batch, 5}, batch + 1000)};
  }
  void ExpectMatchesCpu(ReplicaSet& set, int64_t batch) {
    SCOPED_TRACE(batch);
    PredictOutcome expected = PredictAndWait(*cpu_, Inputs(batch));
    PredictOutcome actual = PredictAndWait(set, Inputs(batch));
    ASSERT_TRUE(expected.status.ok()) << expected.status;
    ASSERT_TRUE(actual.status.ok()) << actual.status;
    ASSERT_EQ(actual.outputs.size(), expected.outputs.size());
    for (size_t j = 0; j < expected.outputs.size(); ++j) {
      EXPECT_EQ(actual.outputs[j].shape(), expected.outputs[j].shape());
      EXPECT_LE(RelativeL2(actual.outputs[j], expected.outputs[j]), kMaxRelativeL2)
          << "output " << j;
    }
  }
  std::shared_ptr<const Model> model_;
  std::unique_ptr<ReplicaSet> cpu_;
};

TEST(ReplicaWeightsTest, HostSlotsReadTheTemplatesWeightsAndDeviceSlotsACopy) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(3, 16), "chain");
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<std::unique_ptr<Replica>> host;
  for (const char* name : {"r0", "r1"}) {
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        Replica::Create(model, SlotAssignment{name, cpu.id, 1.0},
                        CreateCpuDevice(cpu, CpuSlotOptions{1}), Replica::kDefaultMaxPlans);
    ASSERT_TRUE(replica.ok()) << replica.status();
    host.push_back(*std::move(replica));
  }
  std::unique_ptr<Replica> device = StandInReplica(model, "g0");
  ASSERT_NE(device, nullptr);
  const std::map<int, Tensor>& initializers = model->graph().initializers;
  ASSERT_FALSE(initializers.empty());
  for (const auto& [value, tensor] : initializers) {
    // Both host slots: the very bytes of the template (no copy per slot).
    for (const auto& replica : host) {
      EXPECT_EQ(replica->weights().at(value).raw_data(), tensor.raw_data()) << value;
    }
    // A slot in device memory holds its own copy.
    EXPECT_NE(device->weights().at(value).raw_data(), tensor.raw_data()) << value;
  }
}

TEST_F(ReplicaChunkTest, SlicePlanCutsRowsIntoChunksOfAtLeastTheMinimumBytes) {
  std::unique_ptr<Replica> replica = StandInReplica(model_, "g0");
  ASSERT_NE(replica, nullptr);
  // 10 rows of 3*6*6 + 5 floats (452 bytes): four chunks of 3, 3, 3 and 1.
  absl::StatusOr<Replica::SlicePlan> plan = replica->PlanSlice({{10, 3, 6, 6}, {10, 5}}, {4, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->chunks(), 4);
  EXPECT_EQ(plan->chunk_rows, 3);
  EXPECT_NE(plan->last, plan->chunk);
  EXPECT_EQ(plan->output_types[0].shape, (Shape{10, 2}));
  // At least 2000 bytes a chunk: two chunks of 5 rows, one plan.
  plan = replica->PlanSlice({{10, 3, 6, 6}, {10, 5}}, {4, 2000});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->chunks(), 2);
  EXPECT_EQ(plan->last, plan->chunk);
  // Below the minimum, or with chunks off: the slice whole.
  plan = replica->PlanSlice({{10, 3, 6, 6}, {10, 5}}, {4, 1 << 20});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->chunks(), 1);
  plan = replica->PlanSlice({{10, 3, 6, 6}, {10, 5}}, {1, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->chunks(), 1);
  EXPECT_EQ(plan->output_types[0].shape, (Shape{10, 2}));
}

// CUDA graphs, on a stand-in that records work as a CUDA slot with
// --cuda-graphs does (Device::Record): a plan's first run on its buffers
// runs as ever, the second is recorded and replayed, later ones replay, and
// every answer is a plain CPU slot's as new requests fill the same buffers
// (a replay of stale inputs would answer the last request's rows). A
// refused recording is not asked again: the plan runs as ever. A replay
// asks the request's proceed once, before it: a cancelled request fails with
// its reason and replays nothing.
TEST_F(ReplicaChunkTest, RecordedRunsReplayWithEachRequestsInputs) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  for (bool refuse : {false, true}) {
    SCOPED_TRACE(refuse ? "recording refused" : "recorded");
    auto recording = std::make_shared<testing::RecordingStandIn>();
    recording->refuse = refuse;
    std::unique_ptr<Device> device = testing::MakeDeviceMemoryStandIn(
        CreateCpuDevice(cpu, CpuSlotOptions{1}), 0, 0, nullptr, recording);
    const DeviceId id = device->info().id;
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        Replica::Create(model_, SlotAssignment{"g0", id, 1.0}, std::move(device));
    ASSERT_TRUE(replica.ok()) << replica.status();
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set = OneSlotSet(model_, *std::move(replica));
    ASSERT_TRUE(set.ok()) << set.status();
    for (int64_t request = 0; request < 5; ++request) {
      SCOPED_TRACE(request);
      const std::vector<Tensor> inputs = {RandomTensor({4, 3, 6, 6}, 50 + request),
                                          RandomTensor({4, 5}, 60 + request)};
      PredictOutcome expected = PredictAndWait(*cpu_, inputs);
      PredictOutcome actual = PredictAndWait(**set, inputs);
      ASSERT_TRUE(actual.status.ok()) << actual.status;
      for (size_t j = 0; j < expected.outputs.size(); ++j) {
        EXPECT_LE(RelativeL2(actual.outputs[j], expected.outputs[j]), kMaxRelativeL2) << j;
      }
    }
    EXPECT_EQ(recording->recorded.load(), refuse ? 0 : 1);
    EXPECT_EQ(recording->refused.load(), refuse ? 1 : 0);
    EXPECT_EQ(recording->replayed.load(), refuse ? 0 : 4);
    PredictOutcome cancelled = testing::RunAndWait(
        **set, {RandomTensor({4, 3, 6, 6}, 1), RandomTensor({4, 5}, 2)}, {BatchSlice{0, 0, 4}},
        [] { return absl::CancelledError("the client went away"); });
    EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(recording->replayed.load(), refuse ? 0 : 4);
  }
}

TEST_F(ReplicaChunkTest, ChunkedSlicesMatchOneCpuSlot) {
  for (int slots : {1, 2}) {
    for (int chunks : {1, 2, 4, 7}) {
      SCOPED_TRACE(::testing::Message() << slots << " slots, up to " << chunks << " chunks");
      absl::StatusOr<std::unique_ptr<ReplicaSet>> set = StandInSet(model_, slots, chunks, false);
      ASSERT_TRUE(set.ok()) << set.status();
      for (int64_t batch : {1, 2, 7, 64, 101}) ExpectMatchesCpu(**set, batch);
    }
  }
}

TEST_F(ReplicaChunkTest, MergingInDeviceMemoryMatchesOneCpuSlot) {
  for (int chunks : {1, 3}) {
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set = StandInSet(model_, 2, chunks, true);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(DeviceIdToString((*set)->merge_device()), "cuda:0");
    for (int64_t batch : {1, 7, 64}) ExpectMatchesCpu(**set, batch);
  }
}

// A slice cut into chunks is asked between the kernels of every chunk: it
// stops mid-way through its chunks, waits for the copies and kernels already
// issued, and its slot then runs the next slice as ever.
TEST_F(ReplicaChunkTest, AChunkedSliceStopsAtAKernelAndItsSlotRunsOn) {
  for (bool merge_on_device : {false, true}) {
    SCOPED_TRACE(merge_on_device ? "merged on a device" : "merged in host memory");
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set = StandInSet(model_, 1, 4, merge_on_device);
    ASSERT_TRUE(set.ok()) << set.status();
    ExpectMatchesCpu(**set, 10);  // Builds the plans: four chunks of 3, 3, 3 and 1 rows.
    // The first question is before the slice, then one before each kernel of
    // each chunk in turn: the 12th comes after the first chunk's kernels.
    constexpr int kAnswersOk = 11;
    std::atomic<int> asked{0};
    PredictOutcome stopped = testing::RunAndWait(**set, Inputs(10), {BatchSlice{0, 0, 10}}, [&] {
      return ++asked <= kAnswersOk ? absl::OkStatus() : absl::CancelledError("given up");
    });
    EXPECT_EQ(stopped.status.code(), absl::StatusCode::kCancelled) << stopped.status;
    EXPECT_THAT(stopped.status.message(), ::testing::HasSubstr("given up; stopped before kernel"));
    EXPECT_EQ(asked.load(), kAnswersOk + 1);
    ExpectMatchesCpu(**set, 10);
    ExpectMatchesCpu(**set, 7);
  }
}

TEST_F(ReplicaChunkTest, ConcurrentChunkedPredictsGetTheirOwnResults) {
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set = StandInSet(model_, 2, 4, true);
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<PredictOutcome> expected;
  for (int64_t batch = 20; batch < 28; ++batch)
    expected.push_back(PredictAndWait(*cpu_, Inputs(batch)));
  std::vector<PredictOutcome> actual(expected.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < expected.size(); ++i) {
    threads.emplace_back(
        [&, i] { actual[i] = PredictAndWait(**set, Inputs(20 + static_cast<int64_t>(i))); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(actual[i].status.ok()) << actual[i].status;
    for (size_t j = 0; j < expected[i].outputs.size(); ++j) {
      EXPECT_LE(RelativeL2(actual[i].outputs[j], expected[i].outputs[j]), kMaxRelativeL2);
    }
  }
}

// A slot that cannot hold a slice's plans fails the request with
// RESOURCE_EXHAUSTED naming its device, and serves the next one; configured
// to shrink, it runs the slice in smaller chunks instead.
TEST_F(ReplicaChunkTest, OutOfMemoryFailsTheRequestOrShrinksTheChunks) {
  const int64_t batch = 512;
  const std::vector<Shape> shapes = {{batch, 3, 6, 6}, {batch, 5}};
  size_t weights = 0, whole = 0;
  {
    std::unique_ptr<Replica> probe = StandInReplica(model_, "probe");
    weights = probe->device().memory_in_use_bytes();
    ASSERT_TRUE(probe->PlanSlice(shapes, {}).ok());
    whole = probe->device().memory_in_use_bytes();
  }
  ASSERT_GT(whole, weights);
  // Room for 60% of what the whole slice needs beyond the weights.
  const size_t limit = weights + (whole - weights) * 6 / 10;
  for (bool shrink : {false, true}) {
    SCOPED_TRACE(shrink ? "shrink on OOM" : "fail on OOM");
    std::vector<std::unique_ptr<Replica>> replicas;
    replicas.push_back(StandInReplica(model_, "g0", limit));
    ReplicaSet::Options options;
    options.transfer_chunks = 1;
    options.shrink_on_oom = shrink;
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
        ReplicaSet::Create(model_, std::move(replicas), options);
    ASSERT_TRUE(set.ok()) << set.status();
    PredictOutcome outcome = PredictAndWait(**set, Inputs(batch));
    if (shrink) {
      ASSERT_TRUE(outcome.status.ok()) << outcome.status;
      EXPECT_LE((*set)->replicas()[0]->device().memory_in_use_bytes(), limit);
      ExpectMatchesCpu(**set, batch);
    } else {
      EXPECT_EQ(outcome.status.code(), absl::StatusCode::kResourceExhausted) << outcome.status;
      EXPECT_NE(outcome.status.message().find("cuda:0"), std::string::npos) << outcome.status;
    }
    ExpectMatchesCpu(**set, 8);  // The slot still serves what fits.
  }
}

TEST_F(ReplicaChunkTest, BadMergeConfigurationsAreInvalidArgument) {
  // A CPU slot cannot write GPU memory.
  std::vector<std::unique_ptr<Replica>> replicas;
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  absl::StatusOr<std::unique_ptr<Replica>> cpu_replica = Replica::Create(
      model_, SlotAssignment{"r0", cpu.id, 1.0}, CreateCpuDevice(cpu, CpuSlotOptions{1}));
  ASSERT_TRUE(cpu_replica.ok());
  replicas.push_back(*std::move(cpu_replica));
  ReplicaSet::Options options;
  options.merge_device = DeviceId{DeviceKind::kCuda, 0};
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set = ReplicaSet::Create(
      model_, std::move(replicas), options,
      testing::MakeDeviceMemoryStandIn(CreateCpuDevice(cpu, CpuSlotOptions{1}), 0));
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(set.status().message().find("slot r0 is on cpu:0"), std::string::npos) << set.status();

  // A GPU merge device needs its stream.
  std::vector<std::unique_ptr<Replica>> gpu_replicas;
  gpu_replicas.push_back(StandInReplica(model_, "g0"));
  set = ReplicaSet::Create(model_, std::move(gpu_replicas), options);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(set.status().message().find("needs a stream on cuda:0, received none"),
            std::string::npos)
      << set.status();

  std::vector<std::unique_ptr<Replica>> more;
  more.push_back(StandInReplica(model_, "g0"));
  ReplicaSet::Options no_chunks;
  no_chunks.transfer_chunks = 0;
  set = ReplicaSet::Create(model_, std::move(more), no_chunks);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(set.status().message().find("transfer_chunks must be >= 1, received 0"),
            std::string::npos);
}

// Runs a held slice plan on `inputs` on the replica's stream; host outputs.
absl::StatusOr<std::vector<Tensor>> RunHeld(Replica& replica, const Replica::SlicePlan& plan,
                                            const std::vector<Tensor>& inputs) {
  std::vector<const void*> in;
  for (const Tensor& t : inputs) in.push_back(t.raw_data());
  std::vector<Tensor> outputs;
  std::vector<void*> out;
  for (const TensorType& type : plan.output_types) {
    outputs.push_back(Tensor::Host(type.dtype, type.shape));
    out.push_back(outputs.back().raw_data());
  }
  absl::Status status;
  replica.device().Enqueue(
      [&] { status = replica.RunSlice(plan, in.data(), out.data(), MemoryLocation{}); });
  if (absl::Status s = replica.device().Synchronize(); !s.ok()) return s;
  if (!status.ok()) return status;
  return outputs;
}

std::vector<Shape> SliceShapes(int64_t batch) { return {{batch, 3, 6, 6}, {batch, 5}}; }

// A client sending every batch size from 1 to 300 leaves a slot with at most
// max_plans plans; sizes evicted and asked for again are rebuilt and still
// compute what a fresh plan does.
TEST_F(ReplicaChunkTest, PlanCacheHoldsAtMostMaxPlansOverEveryBatchSize) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  absl::StatusOr<std::unique_ptr<Replica>> replica = Replica::Create(
      model_, SlotAssignment{"r0", cpu.id, 1.0}, CreateCpuDevice(cpu, CpuSlotOptions{1}), 8);
  ASSERT_TRUE(replica.ok()) << replica.status();
  EXPECT_EQ((*replica)->max_plans(), 8u);
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set = OneSlotSet(model_, *std::move(replica));
  ASSERT_TRUE(set.ok()) << set.status();
  const Replica& slot = *(*set)->replicas()[0];
  for (int64_t batch = 1; batch <= 300; ++batch) {
    PredictOutcome outcome = PredictAndWait(**set, Inputs(batch));
    ASSERT_TRUE(outcome.status.ok()) << "batch " << batch << ": " << outcome.status;
    ASSERT_LE(slot.plan_count(), 8u) << "batch " << batch;
  }
  EXPECT_EQ(slot.plan_count(), 8u);
  EXPECT_GE(slot.plans_built(), 300u);
  // 1 and 150 were evicted long ago; 300 is still cached.
  for (int64_t batch : {1, 150, 300, 1}) ExpectMatchesCpu(**set, batch);
  EXPECT_LE(slot.plan_count(), 8u);
}

// With a bound on plan memory a slot caches plans while they fit: on a host
// slot (one shared arena: the largest plan's needs plus each plan's own
// buffers) and on a device slot (every plan's buffers and input/output set).
// The least recently used go first; a plan larger than the bound alone runs
// uncached; every answer stays what a fresh plan gives.
TEST_F(ReplicaChunkTest, PlanMemoryStaysUnderItsBoundOverEveryBatchSize) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  for (bool device_memory : {false, true}) {
    SCOPED_TRACE(device_memory ? "device memory" : "host memory");
    // How much one plan of 64 rows holds, measured on an unbounded slot.
    std::unique_ptr<Replica> probe =
        device_memory ? StandInReplica(model_, "g0")
                      : *Replica::Create(model_, SlotAssignment{"r0", cpu.id, 1.0},
                                         CreateCpuDevice(cpu, CpuSlotOptions{1}));
    ASSERT_TRUE(probe->PlanFor(SliceShapes(64)).ok());
    const size_t bound = 2 * probe->plan_memory_bytes();
    ASSERT_GT(bound, 0u);
    probe.reset();

    std::unique_ptr<Device> slot_device =
        device_memory ? testing::MakeDeviceMemoryStandIn(CreateCpuDevice(cpu, CpuSlotOptions{1}), 0)
                      : CreateCpuDevice(cpu, CpuSlotOptions{1});
    const DeviceId id = slot_device->info().id;
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        Replica::Create(model_, SlotAssignment{"s0", id, 1.0}, std::move(slot_device),
                        Replica::kDefaultMaxPlans, bound);
    ASSERT_TRUE(replica.ok()) << replica.status();
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set = OneSlotSet(model_, *std::move(replica));
    ASSERT_TRUE(set.ok()) << set.status();
    const Replica& slot = *(*set)->replicas()[0];
    for (int64_t batch = 1; batch <= 80; ++batch) {
      PredictOutcome outcome = PredictAndWait(**set, Inputs(batch));
      ASSERT_TRUE(outcome.status.ok()) << "batch " << batch << ": " << outcome.status;
      ASSERT_LE(slot.plan_memory_bytes(), bound) << "batch " << batch;
      ASSERT_GT(slot.plan_count(), 0u) << "batch " << batch;
    }
    // Device plans each hold their buffers: the bytes bound comes first. Host
    // plans share one arena, so there the largest plan's size is what counts.
    if (device_memory) {
      EXPECT_LT(slot.plan_count(), Replica::kDefaultMaxPlans);
    }
    // Four times 64 rows needs more than the bound alone: it runs, uncached.
    const size_t cached = slot.plan_count();
    const uint64_t built = slot.plans_built();
    ExpectMatchesCpu(**set, 256);
    EXPECT_EQ(slot.plans_built(), built + 1);
    EXPECT_EQ(slot.plan_count(), cached);
    EXPECT_LE(slot.plan_memory_bytes(), bound);
    ExpectMatchesCpu(**set, 256);  // Built again: nothing kept it.
    EXPECT_EQ(slot.plans_built(), built + 2);
    for (int64_t batch : {1, 40, 80}) ExpectMatchesCpu(**set, batch);
  }
}

TEST_F(ReplicaChunkTest, EvictionRebuildsTheLeastRecentlyUsed) {
  std::unique_ptr<Replica> replica = StandInReplica(model_, "g0", 0, 3);
  ASSERT_NE(replica, nullptr);
  for (int64_t batch : {1, 2, 3}) ASSERT_TRUE(replica->PlanFor(SliceShapes(batch)).ok());
  ASSERT_TRUE(replica->PlanFor(SliceShapes(1)).ok());  // 2 is now the least recently used.
  EXPECT_EQ(replica->plans_built(), 3u);
  ASSERT_TRUE(replica->PlanFor(SliceShapes(4)).ok());  // Evicts 2.
  EXPECT_EQ(replica->plan_count(), 3u);
  for (int64_t batch : {1, 3, 4}) ASSERT_TRUE(replica->PlanFor(SliceShapes(batch)).ok());
  EXPECT_EQ(replica->plans_built(), 4u);  // Still cached: nothing rebuilt.
  ASSERT_TRUE(replica->PlanFor(SliceShapes(2)).ok());
  EXPECT_EQ(replica->plans_built(), 5u);
  EXPECT_EQ(replica->plan_count(), 3u);

  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  absl::StatusOr<std::unique_ptr<Replica>> none = Replica::Create(
      model_, SlotAssignment{"r0", cpu.id, 1.0}, CreateCpuDevice(cpu, CpuSlotOptions{1}), 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("max_plans must be >= 1, received 0"), std::string::npos)
      << none.status();
}

// A slice plan keeps its plans and their device buffers alive after the
// cache evicts them, and still runs; they are freed with the last holder.
TEST_F(ReplicaChunkTest, HeldSlicePlanOutlivesEviction) {
  for (bool device_memory : {false, true}) {
    SCOPED_TRACE(device_memory ? "device memory" : "host memory");
    std::unique_ptr<Replica> replica;
    if (device_memory) {
      replica = StandInReplica(model_, "g0", 0, 8);
    } else {
      const DeviceInfo cpu = EnumerateCpuDevices()[0];
      replica = *Replica::Create(model_, SlotAssignment{"r0", cpu.id, 1.0},
                                 CreateCpuDevice(cpu, CpuSlotOptions{1}), 8);
    }
    ASSERT_NE(replica, nullptr);
    // On the device-memory slot: chunks of 3, 3, 3 and 1 rows, two plans.
    absl::StatusOr<Replica::SlicePlan> held = replica->PlanSlice(SliceShapes(10), {4, 1});
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_EQ(held->chunks(), device_memory ? 4 : 1);
    const std::weak_ptr<ExecutionPlan> chunk = held->chunk;
    const std::weak_ptr<ExecutionPlan> last = held->last;
    for (int64_t batch = 20; batch < 29; ++batch) {
      ASSERT_TRUE(replica->PlanSlice(SliceShapes(batch), {1, 1}).ok());
    }
    EXPECT_EQ(replica->plan_count(), 8u);  // Size 10's plans are out of the cache...
    EXPECT_FALSE(chunk.expired());         // ...but not freed.
    EXPECT_FALSE(last.expired());
    const uint64_t built = replica->plans_built();
    const size_t memory = replica->device().memory_in_use_bytes();

    absl::StatusOr<std::vector<Tensor>> outputs = RunHeld(*replica, *held, Inputs(10));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    PredictOutcome expected = PredictAndWait(*cpu_, Inputs(10));
    ASSERT_TRUE(expected.status.ok()) << expected.status;
    ASSERT_EQ(outputs->size(), expected.outputs.size());
    for (size_t j = 0; j < expected.outputs.size(); ++j) {
      EXPECT_EQ((*outputs)[j].shape(), expected.outputs[j].shape());
      EXPECT_LE(RelativeL2((*outputs)[j], expected.outputs[j]), kMaxRelativeL2) << "output " << j;
    }
    EXPECT_EQ(replica->plans_built(), built);  // Ran the held plans: nothing rebuilt.

    *held = Replica::SlicePlan{};
    EXPECT_TRUE(chunk.expired());
    EXPECT_TRUE(last.expired());
    if (device_memory) {
      EXPECT_LT(replica->device().memory_in_use_bytes(), memory);
    }
  }
}

// Device memory over every batch size 1..300 is what the last 8 sizes' plans
// take: evicted plans and their buffers are given back.
TEST_F(ReplicaChunkTest, EvictedPlansGiveTheirDeviceMemoryBack) {
  std::unique_ptr<Replica> cycled = StandInReplica(model_, "g0", 0, 8);
  std::unique_ptr<Replica> last_eight = StandInReplica(model_, "g1", 0, 8);
  ASSERT_NE(cycled, nullptr);
  ASSERT_NE(last_eight, nullptr);
  for (int64_t batch = 1; batch <= 300; ++batch) {
    ASSERT_TRUE(cycled->PlanSlice(SliceShapes(batch), {1, 1}).ok()) << batch;
    if (batch > 292) {
      ASSERT_TRUE(last_eight->PlanSlice(SliceShapes(batch), {1, 1}).ok());
    }
  }
  EXPECT_EQ(cycled->plan_count(), 8u);
  EXPECT_LE(cycled->device().memory_in_use_bytes(), last_eight->device().memory_in_use_bytes());
}

// Slices evicting each other's plans while others run them (two plans per
// chunked slice, two cached) still get their own results.
TEST_F(ReplicaChunkTest, ConcurrentSlicesWithATinyPlanCacheGetTheirOwnResults) {
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set = StandInSet(model_, 2, 4, true, 2);
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<PredictOutcome> expected;
  for (int64_t batch = 20; batch < 36; ++batch)
    expected.push_back(PredictAndWait(*cpu_, Inputs(batch)));
  std::vector<PredictOutcome> actual(expected.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < expected.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 3; ++round) {
        actual[i] = PredictAndWait(**set, Inputs(20 + static_cast<int64_t>(i)));
        if (!actual[i].status.ok()) return;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(actual[i].status.ok()) << actual[i].status;
    for (size_t j = 0; j < expected[i].outputs.size(); ++j) {
      EXPECT_LE(RelativeL2(actual[i].outputs[j], expected[i].outputs[j]), kMaxRelativeL2);
    }
  }
  for (const auto& replica : (*set)->replicas()) EXPECT_LE(replica->plan_count(), 2u);
}

// A rank-0 output of a chunked slice is the row-weighted mean of the
// chunks' values (as over slices), so a per-sample mean does not depend on
// the cut; an output that does not keep the batch in dim 0 runs the slice
// whole instead of failing.
TEST(ReplicaChunkModelsTest, RankZeroOutputsAreMeansAndBatchReducingModelsRunWhole) {
  std::shared_ptr<const Model> mean_model = testing::LoadOrDie(testing::ScalarMeanOnnx(), "mean");

  OnnxModelBuilder column("column_means");
  // keepdims 1: [1, 4], whatever the batch.
  OnnxModelBuilder::SetInts(column.AddNode("ReduceMean", {"x"}, {"means"}), "axes", {0});
  column.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  column.AddOutput("means", DType::kFloat32, {1, 4});
  std::shared_ptr<const Model> column_model = testing::LoadOrDie(column.Serialize(), "means");

  for (const auto& model : {mean_model, column_model}) {
    SCOPED_TRACE(model->name());
    std::unique_ptr<ReplicaSet> cpu = testing::MakeCpuReplicaSet(model, {1});
    absl::StatusOr<std::unique_ptr<ReplicaSet>> chunked = StandInSet(model, 1, 4, false);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    for (int64_t batch : {1, 5, 64}) {
      PredictOutcome expected = PredictAndWait(*cpu, {RandomTensor({batch, 4}, batch)});
      PredictOutcome actual = PredictAndWait(**chunked, {RandomTensor({batch, 4}, batch)});
      ASSERT_TRUE(expected.status.ok()) << expected.status;
      ASSERT_TRUE(actual.status.ok()) << actual.status;
      for (size_t j = 0; j < expected.outputs.size(); ++j) {
        EXPECT_EQ(actual.outputs[j].shape(), expected.outputs[j].shape());
        EXPECT_LE(RelativeL2(actual.outputs[j], expected.outputs[j]), kMaxRelativeL2)
            << "batch " << batch << " output " << j;
      }
    }
  }
}

}  // namespace
}  // namespace replicad
