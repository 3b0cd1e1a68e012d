// GPU slots across ranks, through NCCL (CTest label gpu). Run with:
//   mpirun --allow-run-as-root --oversubscribe -np 2 tests/mpi_nccl_ranks_gpu_test
// (CTest does). With two GPUs or more each rank trains on its own
// (cuda:<rank>), and the two ranks train like one process with a slot on
// each GPU (NCCL within the process): losses within 1e-6 relative, every
// weight and running statistic within 1e-6 relative L2 after 5 steps (two
// GPUs add a + b alike either way; the tolerance covers a library choosing
// other kernels in the other process). With one GPU both ranks would take
// it, which NCCL does not allow: the step fails on both, naming the GPU.
// Skips without a GPU, and when not started by an MPI launcher (the GPU
// machines' bundle runs each test binary alone: scripts/gpu-check.sh).
//
// Built where the build has both MPI and CUDA.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/backends/backends.h"
#include "core/train/data_parallel_trainer.h"
#include "gtest/gtest.h"
#include "server/ranks/mpi_training_ranks.h"
#include "tests/core/train/train_test_models.h"
#include "tests/server/ranks/test_ranks.h"
#include "tests/testing/local_gpus.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr double kTolerance = 1e-6;  // Relative: losses, and L2 per weight tensor.

std::vector<DeviceInfo> Gpus() { return testing::LocalGpus(); }

// This process's rank, one GPU slot of weight 1.
std::shared_ptr<MpiTrainingRanks> Ranks() { return testing::TestRanks(); }

std::unique_ptr<DataParallelTrainer> MakeTrainer(const std::vector<DeviceInfo>& slots,
                                                 std::shared_ptr<TrainingRanks> ranks) {
  std::vector<TrainerSlot> trainer_slots;
  for (size_t s = 0; s < slots.size(); ++s) {
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(slots[s], SlotOptions{});
    EXPECT_TRUE(device.ok()) << device.status();
    if (!device.ok()) return nullptr;
    trainer_slots.push_back(
        {SlotAssignment{"r" + std::to_string(s), slots[s].id, 1.0}, *std::move(device)});
  }
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"};
  options.optimizer.kind = OptimizerConfig::Kind::kAdam;
  options.optimizer.learning_rate = 0.01f;
  options.seed = 5;
  TrainerReduction reduction;
  reduction.slot_all_reduce = &CreateSlotAllReduce;
  reduction.ranks = std::move(ranks);
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
      DataParallelTrainer::Create(testing::LoadForTraining(testing::ConvNetOnnx(7)),
                                  std::move(trainer_slots), options, std::move(reduction));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

double RelativeL2(const Tensor& got, const Tensor& want) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double d = got.data<float>()[i] - want.data<float>()[i];
    diff += d * d;
    norm += static_cast<double>(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

bool Launched() {
  if (MpiTrainingRanks::LaunchedByMpi()) return true;
  std::cout << "not started by mpirun or srun: nothing to test" << std::endl;
  return false;
}

TEST(MpiNcclRanksGpuTest, TwoRanksOnTwoGpusTrainLikeOneProcessOnBoth) {
  if (!Launched()) GTEST_SKIP() << "run under mpirun -np 2";
  ASSERT_NE(Ranks(), nullptr);
  ASSERT_EQ(Ranks()->size(), 2) << "run under mpirun -np 2";
  const std::vector<DeviceInfo> gpus = Gpus();
  if (gpus.size() < 2) GTEST_SKIP() << "needs two GPUs, one per rank; found " << gpus.size();
  std::unique_ptr<DataParallelTrainer> job = MakeTrainer({gpus[Ranks()->rank()]}, Ranks());
  std::unique_ptr<DataParallelTrainer> one = MakeTrainer({gpus[0], gpus[1]}, nullptr);
  ASSERT_TRUE(job != nullptr && one != nullptr);
  for (int64_t batch : {7, 1, 64}) {
    for (int step = 0; step < 5; ++step) {
      const Tensor images = testing::RandomTensor({batch, 2, 6, 6}, 300 + step);
      const Tensor labels = testing::ClassLabels(batch, 4, step);
      absl::StatusOr<DataParallelTrainer::StepResult> a = job->Step({images}, labels);
      absl::StatusOr<DataParallelTrainer::StepResult> b = one->Step({images}, labels);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_NEAR(a->loss, b->loss, kTolerance * std::abs(b->loss)) << "batch " << batch;
      EXPECT_EQ(a->samples, batch);
    }
  }
  const std::vector<Tensor> got = job->SlotParameters(0).value();
  const std::vector<Tensor> want = one->SlotParameters(0).value();
  ASSERT_EQ(got.size(), want.size());
  for (size_t w = 0; w < got.size(); ++w) {
    EXPECT_LE(RelativeL2(got[w], want[w]), kTolerance) << "parameter " << w;
  }
}

TEST(MpiNcclRanksGpuTest, TwoRanksOnOneGpuAreRefusedNamingIt) {
  if (!Launched()) GTEST_SKIP() << "run under mpirun -np 2";
  ASSERT_NE(Ranks(), nullptr);
  const std::vector<DeviceInfo> gpus = Gpus();
  if (gpus.size() != 1) GTEST_SKIP() << "for a machine of one GPU; found " << gpus.size();
  std::unique_ptr<DataParallelTrainer> job = MakeTrainer({gpus[0]}, Ranks());
  ASSERT_NE(job, nullptr);
  absl::StatusOr<DataParallelTrainer::StepResult> step =
      job->Step({testing::RandomTensor({4, 2, 6, 6}, 1)}, testing::ClassLabels(4, 4, 0));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  EXPECT_NE(step.status().message().find("rank 1 and rank 0 both train on GPU GPU-"),
            std::string::npos)
      << step.status();
}

}  // namespace
}  // namespace replicad
