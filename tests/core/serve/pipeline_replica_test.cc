// PipelineReplica (model parallelism) on CPU slots: an 8-layer MatMul chain
// placed over two contexts answers, micro-batch by micro-batch, exactly what
// one slot computes for the same rows (bit for bit: the same kernels on the
// same shapes), whole or in micro-batches of equal and unequal rows; each
// part runs once per micro-batch and the second reads the first's values
// (their bytes counted); two independent branches placed apart are run by
// their own slots; --slot-memory-limit refuses a context whose weights do
// not fit and admits the same model placed over two; bad inputs are refused
// naming the input.

#include "core/serve/pipeline_replica.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/serve/pipeline_servable.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/device_memory_stand_in.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWidth = 64;
constexpr int kLayers = 8;

std::vector<SlotAssignment> Contexts() {
  const DeviceId cpu = EnumerateCpuDevices()[0].id;
  return {SlotAssignment{"dev0", cpu, 1}, SlotAssignment{"dev1", cpu, 1}};
}

absl::StatusOr<std::unique_ptr<Device>> CpuSlot(const SlotAssignment&) {
  return CreateCpuDevice(EnumerateCpuDevices()[0], CpuSlotOptions{1});
}

absl::StatusOr<std::unique_ptr<PipelineReplica>> Pipeline(std::shared_ptr<const Model> model,
                                                          const std::string& rules,
                                                          size_t limit = 0) {
  absl::StatusOr<std::vector<PlacementRule>> parsed = ParsePlacement(rules, "placement");
  if (!parsed.ok()) return parsed.status();
  std::vector<std::string> names;
  for (const SlotAssignment& s : Contexts()) names.push_back(s.name);
  absl::StatusOr<PlacedGraph> placed = PlaceGraph(model->graph(), *parsed, names);
  if (!placed.ok()) return placed.status();
  PipelineReplicaOptions options;
  options.slot_memory_limit = limit;
  return PipelineReplica::Create(std::move(model), *std::move(placed), Contexts(), CpuSlot,
                                 options);
}

// One slot's answer for rows [begin, begin + rows) of x.
Tensor OneSlot(std::shared_ptr<const Model> model, const Tensor& x, int64_t begin, int64_t rows) {
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(std::move(model), {1});
  Tensor slice = Tensor::Host(DType::kFloat32, {rows, kWidth});
  std::memcpy(slice.raw_data(), x.data<float>() + begin * kWidth, slice.byte_size());
  testing::PredictOutcome outcome = testing::PredictAndWait(*set, {slice});
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  return outcome.outputs[0];
}

TEST(PipelineReplicaTest, TwoStagesAnswerWhatOneSlotDoesForTheSameRows) {
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(kLayers, kWidth), "chain");
  absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline =
      Pipeline(model, "layer0*->dev0; layer4*->dev1");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_EQ((*pipeline)->part_count(), 2u);
  EXPECT_EQ((*pipeline)->part_context(0), "dev0");
  EXPECT_EQ((*pipeline)->part_context(1), "dev1");
  EXPECT_EQ((*pipeline)->weight_bytes().at("dev0"), 4 * kWidth * kWidth * sizeof(float));

  const Tensor x = testing::RandomTensor({7, kWidth}, 5);
  // micro-batches -> rows of each: 1 -> 7; 7 -> 1 each; 3 -> 3, 3, 1.
  for (int micro_batches : {1, 7, 3}) {
    SCOPED_TRACE(absl::StrCat(micro_batches, " micro-batches"));
    absl::StatusOr<std::vector<Tensor>> y = (*pipeline)->Run({x}, micro_batches);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->size(), 1u);
    ASSERT_EQ((*y)[0].shape(), Shape({7, kWidth}));
    const int64_t chunk = (7 + micro_batches - 1) / micro_batches;
    for (int64_t begin = 0; begin < 7; begin += chunk) {
      const int64_t rows = std::min<int64_t>(chunk, 7 - begin);
      const Tensor expected = OneSlot(model, x, begin, rows);
      EXPECT_EQ(std::memcmp((*y)[0].data<float>() + begin * kWidth, expected.raw_data(),
                            expected.byte_size()),
                0)
          << "rows " << begin << " to " << begin + rows;
    }
  }
  std::vector<PipelineReplica::PartStats> stats = (*pipeline)->Stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].runs, 1u + 7u + 3u);
  EXPECT_EQ(stats[1].runs, 1u + 7u + 3u);
  EXPECT_EQ(stats[0].bytes_in, 0u);  // It reads the request's rows, not another part's.
  EXPECT_EQ(stats[1].bytes_in, 3 * 7 * kWidth * sizeof(float));
  EXPECT_GT(stats[1].busy_seconds, 0);
}

std::string TwoBranchesOnnx() {
  OnnxModelBuilder b("branches", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, kWidth});
  b.AddInitializer("wl", testing::RandomTensor({kWidth, kWidth}, 1));
  b.AddInitializer("wr", testing::RandomTensor({kWidth, kWidth}, 2));
  b.AddNode("MatMul", {"x", "wl"}, {"left"});
  b.AddNode("MatMul", {"x", "wr"}, {"right"});
  b.AddNode("Add", {"left", "right"}, {"y"});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kWidth});
  return b.Serialize();
}

TEST(PipelineReplicaTest, IndependentBranchesRunOnTheirOwnSlots) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(TwoBranchesOnnx(), "branches");
  absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline =
      Pipeline(model, "left->dev0; right->dev1");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_EQ((*pipeline)->part_count(), 3u);
  const Tensor x = testing::RandomTensor({5, kWidth}, 9);
  absl::StatusOr<std::vector<Tensor>> y = (*pipeline)->Run({x}, 1);
  ASSERT_TRUE(y.ok()) << y.status();
  const Tensor expected = OneSlot(model, x, 0, 5);
  EXPECT_EQ(std::memcmp((*y)[0].raw_data(), expected.raw_data(), expected.byte_size()), 0);
  std::vector<PipelineReplica::PartStats> stats = (*pipeline)->Stats();
  EXPECT_EQ(stats[0].context, "dev0");
  EXPECT_EQ(stats[1].context, "dev1");
  // The sum reads both products.
  EXPECT_EQ(stats[2].bytes_in, 2 * 5 * kWidth * sizeof(float));
}

TEST(PipelineReplicaTest, TheSlotMemoryLimitRefusesWhatOnlyTwoContextsHold) {
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(kLayers, kWidth), "chain");
  const size_t all = kLayers * kWidth * kWidth * sizeof(float);  // 131072 bytes.
  absl::StatusOr<std::unique_ptr<PipelineReplica>> one = Pipeline(model, "layer*->dev0", all / 2);
  EXPECT_EQ(one.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(one.status().message(),
            "context 'dev0' would hold 131072 bytes of weights, over its 65536 bytes "
            "(--slot-memory-limit); place fewer nodes there");
  absl::StatusOr<std::unique_ptr<PipelineReplica>> two =
      Pipeline(model, "layer0*->dev0; layer4*->dev1", all / 2);
  ASSERT_TRUE(two.ok()) << two.status();
  const Tensor x = testing::RandomTensor({4, kWidth}, 3);
  absl::StatusOr<std::vector<Tensor>> y = (*two)->Run({x}, 2);
  ASSERT_TRUE(y.ok()) << y.status();
}

// Batches from several threads at once (a servable runs two at a time)
// interleave on the parts' slots and each gets its own answer.
TEST(PipelineReplicaTest, ConcurrentBatchesEachGetTheirOwnAnswer) {
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(kLayers, kWidth), "chain");
  absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline =
      Pipeline(model, "layer0*->dev0; layer4*->dev1");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  constexpr int kThreads = 3;
  std::vector<Tensor> xs, ys(kThreads);
  for (int t = 0; t < kThreads; ++t) xs.push_back(testing::RandomTensor({4, kWidth}, 30 + t));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 5; ++repeat) {
        absl::StatusOr<std::vector<Tensor>> y = (*pipeline)->Run({xs[t]}, 4);
        ASSERT_TRUE(y.ok()) << y.status();
        ys[t] = (*y)[0];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int64_t row = 0; row < 4; ++row) {
      const Tensor expected = OneSlot(model, xs[t], row, 1);
      EXPECT_EQ(std::memcmp(ys[t].data<float>() + row * kWidth, expected.raw_data(),
                            expected.byte_size()),
                0)
          << "thread " << t << " row " << row;
    }
  }
}

// A batch no longer wanted (its deadline passed) stops where a part asks:
// Run answers that error, and no part runs a micro-batch after it.
TEST(PipelineReplicaTest, ABatchNoLongerWantedStopsBetweenMicroBatches) {
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(kLayers, kWidth), "chain");
  absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline =
      Pipeline(model, "layer0*->dev0; layer4*->dev1");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  std::atomic<int> asked{0};
  const std::function<absl::Status()> wanted = [&asked]() -> absl::Status {
    return ++asked > 3 ? absl::DeadlineExceededError("deadline passed") : absl::OkStatus();
  };
  std::vector<PipelineReplica::PartStats> parts;
  absl::StatusOr<std::vector<Tensor>> y =
      (*pipeline)->Run({testing::RandomTensor({8, kWidth}, 2)}, 8, &parts, &wanted);
  EXPECT_EQ(y.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].runs + parts[1].runs, 3u);  // This batch's: what ran.
  uint64_t ran = 0;
  for (const PipelineReplica::PartStats& stats : (*pipeline)->Stats()) ran += stats.runs;
  EXPECT_EQ(ran, 3u);  // Exactly the three asks answered OK ran.
}

TEST(PipelineReplicaTest, BadInputsAreRefusedNamingTheInput) {
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(kLayers, kWidth), "chain");
  absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline =
      Pipeline(model, "layer0*->dev0; layer4*->dev1");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_THAT(std::string((*pipeline)->Run({}, 1).status().message()),
              HasSubstr("expected 1 inputs, received 0"));
  const Tensor ints = Tensor::Host(DType::kInt64, {2, kWidth});
  EXPECT_THAT(std::string((*pipeline)->Run({ints}, 1).status().message()),
              HasSubstr("input 0 'x': expected float32"));
  const Tensor x = testing::RandomTensor({2, kWidth}, 1);
  EXPECT_EQ((*pipeline)->Run({x}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // More micro-batches than rows: one row each.
  absl::StatusOr<std::vector<Tensor>> y = (*pipeline)->Run({x}, 64);
  ASSERT_TRUE(y.ok()) << y.status();
}

// Two pipelines of one model (data parallelism over pipelines) are two
// slots, pipeline0 and pipeline1: a batch split over both answers each row
// as one slot does. A pipeline whose part's slot failed for good (a GPU's
// sticky error, by a stand-in) reports that part's error as its health and
// refuses slices, Unavailable; the other still serves.
TEST(PipelineServableTest, PipelinesAreSlotsAndAFailedPartTakesItsPipelineOut) {
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(kLayers, kWidth), "chain");
  std::vector<std::string> names = {"dev0", "dev1"};
  absl::StatusOr<PlacedGraph> placed =
      PlaceGraph(model->graph(), *ParsePlacement("layer0*->dev0; layer4*->dev1", "p"), names);
  ASSERT_TRUE(placed.ok()) << placed.status();
  auto fault = std::make_shared<testing::InjectedFault>();
  std::vector<std::unique_ptr<PipelineReplica>> pipelines;
  for (int copy = 0; copy < 2; ++copy) {
    absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline = PipelineReplica::Create(
        model, *placed, Contexts(),
        [&](const SlotAssignment& slot) -> absl::StatusOr<std::unique_ptr<Device>> {
          absl::StatusOr<std::unique_ptr<Device>> cpu = CpuSlot(slot);
          if (!cpu.ok() || copy == 0 || slot.name != "dev1") return cpu;
          return testing::MakeDeviceMemoryStandIn(*std::move(cpu), 1, 0, fault);
        });
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    pipelines.push_back(*std::move(pipeline));
  }
  PipelineServable servable(std::move(pipelines), 2, {Contexts(), Contexts()});
  std::vector<SlotStatus> slots = servable.Slots();
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0].slot, "pipeline0");
  EXPECT_EQ(slots[1].slot, "pipeline1");
  EXPECT_TRUE(slots[1].health.ok());

  const Tensor x = testing::RandomTensor({7, kWidth}, 5);
  testing::PredictOutcome split =
      testing::RunAndWait(servable, {x}, {BatchSlice{0, 0, 3}, BatchSlice{1, 3, 7}});
  ASSERT_TRUE(split.status.ok()) << split.status;
  ASSERT_EQ(split.outputs[0].shape(), (Shape{7, kWidth}));
  const Tensor whole = OneSlot(model, x, 0, 7);
  EXPECT_EQ(std::memcmp(split.outputs[0].raw_data(), whole.raw_data(), whole.byte_size()), 0);

  fault->copies_before_failure = 0;  // pipeline1's dev1 fails on its next copy, for good.
  EXPECT_FALSE(testing::RunAndWait(servable, {x}, {BatchSlice{1, 0, 7}}).status.ok());
  slots = servable.Slots();
  EXPECT_TRUE(slots[0].health.ok());
  EXPECT_THAT(std::string(slots[1].health.message()), HasSubstr("part on context 'dev1'"));
  absl::Status refused = testing::RunAndWait(servable, {x}, {BatchSlice{1, 0, 7}}).status;
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("pipeline1 cannot run the model"));
  EXPECT_TRUE(testing::RunAndWait(servable, {x}, {BatchSlice{0, 0, 7}}).status.ok());
}

}  // namespace
}  // namespace replicad
