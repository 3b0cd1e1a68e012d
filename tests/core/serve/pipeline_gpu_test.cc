// Model parallelism on GPU slots: a MatMul chain placed over two GPU
// contexts (cuda:0 and cuda:1, or cuda:0 twice on a machine with one GPU),
// and over a CPU context and a GPU one, answers what one CPU slot does for
// the same rows; the convolution net trains through a GPU pipeline of four
// micro-batches like one CPU slot. The GPU and the CPU sum in other orders:
// answers within 1e-4 relative L2, losses within 1e-4 relative, weights within
// 1e-4 relative L2 after 5 steps. Skips without a GPU (CTest label gpu).

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/serve/pipeline_replica.h"
#include "core/serve/pipeline_trainer.h"
#include "core/train/data_parallel_trainer.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/local_gpus.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr double kTolerance = 1e-4;
constexpr int64_t kWidth = 64;

DeviceInfo Cpu() { return (*EnumerateDevices())[0]; }

// dev0 on `first`, dev1 on `second`.
std::vector<SlotAssignment> Contexts(const DeviceInfo& first, const DeviceInfo& second) {
  return {SlotAssignment{"dev0", first.id, 1}, SlotAssignment{"dev1", second.id, 1}};
}

PipelineReplica::DeviceMaker Devices() {
  return [](const SlotAssignment& slot) -> absl::StatusOr<std::unique_ptr<Device>> {
    absl::StatusOr<std::vector<DeviceInfo>> all = EnumerateDevices();
    if (!all.ok()) return all.status();
    const DeviceInfo* info = FindDevice(*all, slot.device);
    if (info == nullptr) return absl::NotFoundError(DeviceIdToString(slot.device));
    return CreateDevice(*info, SlotOptions{});
  };
}

TEST(PipelineGpuTest, GpuContextsAnswerAsOneCpuSlot) {
  const std::vector<DeviceInfo> gpus = testing::LocalGpus();
  if (gpus.empty()) GTEST_SKIP() << "no GPU";
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(8, kWidth), "chain");
  const Tensor x = testing::RandomTensor({7, kWidth}, 5);
  std::unique_ptr<ReplicaSet> one = testing::MakeCpuReplicaSet(model, {1});
  testing::PredictOutcome want = testing::PredictAndWait(*one, {x});
  ASSERT_TRUE(want.status.ok()) << want.status;
  const std::vector<std::vector<SlotAssignment>> placements = {
      Contexts(gpus[0], gpus[1 % gpus.size()]), Contexts(Cpu(), gpus[0])};
  for (const std::vector<SlotAssignment>& contexts : placements) {
    SCOPED_TRACE(DeviceIdToString(contexts[0].device) + " + " +
                 DeviceIdToString(contexts[1].device));
    absl::StatusOr<PlacedGraph> placed = PlaceGraph(
        model->graph(), *ParsePlacement("layer0*->dev0; layer4*->dev1", "p"), {"dev0", "dev1"});
    ASSERT_TRUE(placed.ok()) << placed.status();
    absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline =
        PipelineReplica::Create(model, *std::move(placed), contexts, Devices());
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    for (int micro_batches : {1, 3}) {
      absl::StatusOr<std::vector<Tensor>> got = (*pipeline)->Run({x}, micro_batches);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_LE(testing::RelativeL2((*got)[0], want.outputs[0]), kTolerance)
          << micro_batches << " micro-batches";
    }
    EXPECT_TRUE((*pipeline)->health().ok());
  }
}

TEST(PipelineGpuTest, TrainsThroughGpuContextsAsOneCpuSlot) {
  const std::vector<DeviceInfo> gpus = testing::LocalGpus();
  if (gpus.empty()) GTEST_SKIP() << "no GPU";
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits", DType::kInt64};
  options.optimizer = testing::TrainingOptimizers()[1];  // Adam.
  std::vector<TrainerSlot> slots;
  slots.push_back({SlotAssignment{"r0", Cpu().id, 1.0}, *CreateDevice(Cpu(), SlotOptions{})});
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> one = DataParallelTrainer::Create(
      testing::LoadForTraining(testing::ConvNetOnnx(7)), std::move(slots), options, {});
  ASSERT_TRUE(one.ok()) << one.status();
  std::shared_ptr<const Model> model = testing::LoadForTraining(testing::ConvNetOnnx(7));
  absl::StatusOr<std::vector<std::string>> context_of =
      NodeContexts(model->graph(), *ParsePlacement("c->dev0; logits->dev1", "p"), {"dev0", "dev1"});
  ASSERT_TRUE(context_of.ok()) << context_of.status();
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> piped = PipelineTrainer::Create(
      model, *context_of, {Contexts(gpus[0], gpus[1 % gpus.size()])}, Devices(), options, 4);
  ASSERT_TRUE(piped.ok()) << piped.status();
  for (int step = 0; step < 5; ++step) {
    const Tensor images = testing::RandomTensor({8, 2, 6, 6}, 100 + step);
    const Tensor labels = testing::ClassLabels(8, 4, step);
    absl::StatusOr<TrainerStepResult> want = (*one)->Step({images}, labels);
    absl::StatusOr<TrainerStepResult> got = (*piped)->Step({images}, labels);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(got->loss, want->loss, kTolerance * std::fabs(want->loss)) << "step " << step;
  }
  std::shared_ptr<const Model> trained = *(*one)->CurrentModel();
  const std::map<std::string, Tensor> weights = (*piped)->Parameters();
  for (const auto& [v, weight] : trained->graph().initializers) {
    auto it = weights.find(trained->graph().values[v].name);
    if (it == weights.end()) continue;
    EXPECT_LE(testing::RelativeL2(it->second, weight), kTolerance) << it->first;
  }
}

}  // namespace
}  // namespace replicad
