// PipelineTrainer (a training step through a pipeline, model parallelism): a
// convolution net placed over two contexts (the convolution on dev0, the
// classifier on dev1) trains 5 steps with SGD (momentum, Nesterov, weight
// decay) and Adam like one DataParallelTrainer slot: in one micro-batch bit
// for bit (the same kernels on the same shapes, the same update), in four
// within 1e-6 relative (losses, and every parameter's L2: the micro-batches'
// sums add in another order). The backward pass of the convolution runs on
// dev0 again, after the classifier's on dev1 (three parts).

#include "core/serve/pipeline_trainer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/train/data_parallel_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 8;

TrainerOptions Options(const OptimizerConfig& optimizer) {
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits", DType::kInt64};
  options.optimizer = optimizer;
  return options;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, Tensor> weights;
};

Trained OneSlotTraining(const OptimizerConfig& optimizer) {
  std::shared_ptr<const Model> model = testing::LoadForTraining(testing::ConvNetOnnx(7));
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<TrainerSlot> slots;
  slots.push_back({SlotAssignment{"r0", cpu.id, 1.0}, CreateCpuDevice(cpu, {1})});
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
      DataParallelTrainer::Create(model, std::move(slots), Options(optimizer), {});
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  Trained run;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<DataParallelTrainer::StepResult> result =
        (*trainer)->Step({testing::RandomTensor({kBatch, 2, 6, 6}, 100 + step)},
                         testing::ClassLabels(kBatch, 4, step));
    EXPECT_TRUE(result.ok()) << result.status();
    run.losses.push_back(result->loss);
  }
  std::shared_ptr<const Model> trained = *(*trainer)->CurrentModel();
  for (const auto& [v, weight] : trained->graph().initializers) {
    run.weights.emplace(trained->graph().values[v].name, weight);
  }
  return run;
}

absl::StatusOr<std::unique_ptr<PipelineTrainer>> Placed(const OptimizerConfig& optimizer,
                                                        int micro_batches) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  return PipelineTrainer::Create(
      testing::LoadForTraining(testing::ConvNetOnnx(7)),
      *ParsePlacement("c->dev0; logits->dev1", "p"),
      {SlotAssignment{"dev0", cpu.id, 1}, SlotAssignment{"dev1", cpu.id, 1}},
      [cpu](const SlotAssignment&) -> absl::StatusOr<std::unique_ptr<Device>> {
        return CreateCpuDevice(cpu, CpuSlotOptions{1});
      },
      Options(optimizer), micro_batches);
}

Trained Pipelined(const OptimizerConfig& optimizer, int micro_batches) {
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> trainer = Placed(optimizer, micro_batches);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  Trained run;
  if (!trainer.ok()) return run;
  const PipelineReplica& pipeline = (*trainer)->pipeline();
  EXPECT_GE(pipeline.part_count(), 3u);
  EXPECT_EQ(pipeline.part_context(0), "dev0");
  EXPECT_EQ(pipeline.part_context(pipeline.part_count() - 1), "dev0");  // The conv's gradient.
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<PipelineTrainer::StepResult> result =
        (*trainer)->Step({testing::RandomTensor({kBatch, 2, 6, 6}, 100 + step)},
                         testing::ClassLabels(kBatch, 4, step));
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return run;
    EXPECT_EQ(result->step, step + 1);
    run.losses.push_back(result->loss);
  }
  run.weights = (*trainer)->Parameters();
  return run;
}

TEST(PipelineTrainerTest, TrainsLikeOneSlot) {
  const std::vector<OptimizerConfig> optimizers = testing::TrainingOptimizers();
  for (const OptimizerConfig& optimizer : {optimizers[0], optimizers[1]}) {
    const Trained one = OneSlotTraining(optimizer);
    ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
    EXPECT_NE(one.losses.front(), one.losses.back()) << "training moved nothing";
    for (int micro_batches : {1, 4}) {
      SCOPED_TRACE(absl::StrCat(micro_batches, " micro-batch(es), optimizer ",
                                static_cast<int>(optimizer.kind)));
      const Trained placed = Pipelined(optimizer, micro_batches);
      ASSERT_EQ(placed.losses.size(), static_cast<size_t>(kSteps));
      ASSERT_EQ(placed.weights.size(), 4u);
      for (int step = 0; step < kSteps; ++step) {
        if (micro_batches == 1) {
          EXPECT_EQ(placed.losses[step], one.losses[step]) << "step " << step;
        } else {
          EXPECT_NEAR(placed.losses[step], one.losses[step], 1e-6 * std::fabs(one.losses[step]))
              << "step " << step;
        }
      }
      for (const auto& [name, weight] : placed.weights) {
        const Tensor& expected = one.weights.at(name);
        if (micro_batches == 1) {
          EXPECT_EQ(std::memcmp(weight.raw_data(), expected.raw_data(), expected.byte_size()), 0)
              << name;
        } else {
          EXPECT_LE(testing::RelativeL2(weight, expected), 1e-6) << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace replicad
