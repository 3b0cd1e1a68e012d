// Data-parallel training is exact: N CPU slots train like one on the whole
// batch, whatever the split, and the slots' weights stay identical.

#include "core/train/data_parallel_trainer.h"

#include <cstring>
#include <memory>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<DataParallelTrainer> MakeTrainer(int slots, const OptimizerConfig& optimizer) {
  std::vector<TrainerSlot> trainer_slots;
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  for (int s = 0; s < slots; ++s) {
    trainer_slots.push_back(
        {SlotAssignment{"r" + std::to_string(s), cpu.id, 1.0}, CreateCpuDevice(cpu, {1})});
  }
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"};
  options.optimizer = optimizer;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer = DataParallelTrainer::Create(
      testing::LoadForTraining(testing::ConvNetOnnx(7)), std::move(trainer_slots), options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return *std::move(trainer);
}

Tensor Labels(int64_t batch, uint64_t seed) {
  Tensor labels = Tensor::Host(DType::kInt64, {batch});
  for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = (i * 7 + seed) % 4;
  return labels;
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<Tensor> weights;
};

TrainedRun Train(int slots, int64_t batch, const OptimizerConfig& optimizer) {
  std::unique_ptr<DataParallelTrainer> trainer = MakeTrainer(slots, optimizer);
  TrainedRun run;
  for (int step = 0; step < 5; ++step) {
    absl::StatusOr<DataParallelTrainer::StepResult> result = trainer->Step(
        {testing::RandomTensor({batch, 2, 6, 6}, 100 + step)}, Labels(batch, step));
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return run;
    EXPECT_EQ(result->step, step + 1);
    EXPECT_EQ(result->samples, batch);
    EXPECT_EQ(result->slices.size(), static_cast<size_t>(std::min<int64_t>(batch, slots)));
    EXPECT_TRUE(result->accuracy.has_value()) << "classification";
    run.losses.push_back(result->loss);
  }
  run.weights = trainer->SlotParameters(0);
  // Every slot holds the same weights, bit for bit.
  for (int s = 1; s < slots; ++s) {
    std::vector<Tensor> other = trainer->SlotParameters(s);
    for (size_t p = 0; p < other.size(); ++p) {
      EXPECT_EQ(std::memcmp(other[p].raw_data(), run.weights[p].raw_data(), other[p].byte_size()),
                0)
          << "slot " << s << " parameter " << p;
    }
  }
  return run;
}

// 1, 2 and 3 slots, batches 7 (uneven), 2 (fewer rows than slots) and 64:
// losses and weights after 5 steps within 1e-5 relative of one slot's.
TEST(DataParallelTrainerTest, SlotsTrainLikeOneDevice) {
  OptimizerConfig sgd;
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 1e-3f;
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::kAdam;
  adam.learning_rate = 0.01f;
  for (const OptimizerConfig& optimizer : {sgd, adam}) {
    for (int64_t batch : {7, 2, 64}) {
      const TrainedRun one = Train(1, batch, optimizer);
      ASSERT_EQ(one.losses.size(), 5u);
      EXPECT_NE(one.losses.front(), one.losses.back()) << "training moved nothing";
      for (int slots : {2, 3}) {
        const TrainedRun many = Train(slots, batch, optimizer);
        ASSERT_EQ(many.losses.size(), 5u);
        for (int step = 0; step < 5; ++step) {
          EXPECT_NEAR(many.losses[step], one.losses[step], 1e-5 * std::fabs(one.losses[step]))
              << slots << " slots, batch " << batch << ", step " << step;
        }
        for (size_t p = 0; p < one.weights.size(); ++p) {
          EXPECT_LE(testing::RelativeL2(many.weights[p], one.weights[p]), 1e-5)
              << slots << " slots, batch " << batch << ", parameter " << p;
        }
      }
    }
  }
}

TEST(DataParallelTrainerTest, BadTargetsChangeNothing) {
  OptimizerConfig sgd;
  std::unique_ptr<DataParallelTrainer> trainer = MakeTrainer(2, sgd);
  const std::vector<Tensor> before = trainer->SlotParameters(0);
  const Tensor images = testing::RandomTensor({4, 2, 6, 6}, 1);

  Tensor out_of_range = Labels(4, 0);
  out_of_range.data<int64_t>()[3] = 9;
  absl::StatusOr<DataParallelTrainer::StepResult> result = trainer->Step({images}, out_of_range);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("must be a class in [0, 4), received 9"));

  result = trainer->Step({images}, Labels(3, 0));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("targets: dim 0 must be the batch size 4 of the inputs, received [3]"));

  result = trainer->Step({images}, testing::RandomTensor({4}, 2));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("targets: dtype must be int64, received float32"));

  EXPECT_EQ(trainer->step(), 0);
  const std::vector<Tensor> after = trainer->SlotParameters(0);
  for (size_t p = 0; p < before.size(); ++p) {
    EXPECT_EQ(std::memcmp(before[p].raw_data(), after[p].raw_data(), before[p].byte_size()), 0);
  }
  // And the trainer still trains.
  EXPECT_TRUE(trainer->Step({images}, Labels(4, 0)).ok());
  EXPECT_EQ(trainer->step(), 1);
}

}  // namespace
}  // namespace replicad
