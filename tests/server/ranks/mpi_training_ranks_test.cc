// Run with: mpirun --allow-run-as-root --oversubscribe -np 2 tests/mpi_training_ranks_test
// (CTest does). Every rank runs every test, in the same order.
//
// Training across ranks (docs/distributed-training.md) is exact: two ranks of one CPU slot, against
// one process of two slots (SGD with momentum and Adam; batches 7, 2, 64 and 1; five steps; the
// PyTorch-exported BatchNormalization + Dropout 0.3 CNN), give bit for bit the same losses,
// accuracies, weights and running statistics. Per-rank shards of 4+3, 2+5, 1+1 and 40+24 rows equal
// one process of two slots whose weights cut the batch at the same row. Ranks that each hold a
// stand-in for a GPU slot (device memory the host can read, CPU kernels, a CPU
// replicad.OptimizerStep kernel for the optimizer on the device), with a reduction that sums across
// the ranks on the host where NCCL would, train bit for bit like one process of two CPU slots
// (whole batches and shards). Built where the build has MPI (not in the sanitizer builds).
#include "server/ranks/mpi_training_ranks.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/train/data_parallel_trainer.h"
#include "gtest/gtest.h"
#include "tests/core/train/torch_reference.h"
#include "tests/core/train/train_test_models.h"
#include "tests/server/ranks/test_ranks.h"
#include "tests/testing/device_memory_stand_in.h"
#include "tests/testing/host_sum_slot_all_reduce.h"

namespace replicad {
namespace {

// This process's rank, one CPU slot of weight 1.
std::shared_ptr<MpiTrainingRanks> Ranks() { return testing::TestRanks(); }

// Which slots a trainer gets: CPU slots, or stand-ins for GPU slots
// (tests/testing/device_memory_stand_in.h) that reduce like GPUs under
// allreduce, through a SlotAllReduce summing on the host across the ranks
// (tests/testing/host_sum_slot_all_reduce.h) where NCCL would.
enum class Slots { kCpu, kGpuStandIns };

// Slots of weight 1, or of `weights`.
std::unique_ptr<DataParallelTrainer> MakeTrainer(int slots, const OptimizerConfig& optimizer,
                                                 std::shared_ptr<const Model> model,
                                                 std::shared_ptr<TrainingRanks> ranks,
                                                 std::vector<double> weights = {},
                                                 Slots kind = Slots::kCpu) {
  std::vector<TrainerSlot> trainer_slots;
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  weights.resize(static_cast<size_t>(slots), 1.0);
  for (int s = 0; s < slots; ++s) {
    std::unique_ptr<Device> device = CreateCpuDevice(cpu, {1});
    if (kind == Slots::kGpuStandIns)
      device = testing::MakeDeviceMemoryStandIn(std::move(device), s);
    const DeviceId id = device->info().id;
    trainer_slots.push_back(
        {SlotAssignment{"r" + std::to_string(s), id, weights[s]}, std::move(device)});
  }
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits", DType::kInt64};
  options.optimizer = optimizer;
  options.seed = 5;
  TrainerReduction reduction;
  reduction.ranks = std::move(ranks);
  reduction.slot_all_reduce = [](const std::vector<Device*>& devices,
                                 const SlotAllReducePeers* peers) {
    return absl::StatusOr<std::unique_ptr<SlotAllReduce>>(
        testing::MakeHostSumSlotAllReduce(static_cast<int>(devices.size()), peers));
  };
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer = DataParallelTrainer::Create(
      std::move(model), std::move(trainer_slots), options, std::move(reduction));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// The weights and running statistics of a trainer's first slot.
std::vector<Tensor> Weights(const DataParallelTrainer& trainer) {
  std::vector<Tensor> weights = trainer.SlotParameters(0).value();
  std::vector<Tensor> buffers = trainer.SlotBuffers(0).value();
  for (Tensor& b : buffers) weights.push_back(std::move(b));
  return weights;
}

// The weights and running statistics of `job` and `one` agree bit for bit.
void ExpectSameWeights(const DataParallelTrainer& job, const DataParallelTrainer& one,
                       int64_t batch) {
  const std::vector<Tensor> got = Weights(job);
  const std::vector<Tensor> want = Weights(one);
  ASSERT_EQ(got.size(), want.size());
  for (size_t w = 0; w < got.size(); ++w) {
    ASSERT_EQ(got[w].byte_size(), want[w].byte_size());
    EXPECT_EQ(std::memcmp(got[w].raw_data(), want[w].raw_data(), got[w].byte_size()), 0)
        << "batch " << batch << ", tensor " << w << " differs from one process's";
  }
}

// The PyTorch-exported CNN with BatchNormalization and Dropout 0.3: rank
// 0's export, on every rank (empty when rank 0 could not export it).
std::string BatchNormDropoutOnnx() {
  std::string onnx;
  if (Ranks()->rank() == 0) {
    const std::string& dir = testing::TorchReferenceOutput(REPLICAD_TRAINING_SCRIPT);
    if (!dir.empty()) onnx = testing::ReadFileBytes(dir + "/bn_p3.onnx");
  }
  int size = static_cast<int>(onnx.size());
  MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
  onnx.resize(static_cast<size_t>(size));
  MPI_Bcast(onnx.data(), size, MPI_BYTE, 0, MPI_COMM_WORLD);
  return onnx;
}

// Rows [begin, end) of a host tensor, as a tensor of their own.
Tensor Rows(const Tensor& t, int64_t begin, int64_t end) {
  absl::StatusOr<Tensor> rows = t.SliceRows(begin, end);
  EXPECT_TRUE(rows.ok()) << rows.status();
  Shape shape = t.shape();
  shape[0] = end - begin;
  Tensor copy = Tensor::Host(t.dtype(), shape);
  std::memcpy(copy.raw_data(), rows->raw_data(), copy.byte_size());
  return copy;
}

// 5 steps of two ranks of one slot each against one process of two slots,
// on the same batches: the same sums in the same order, so the same bits
// (losses, accuracies, weights and running statistics). Rank 0 steps on the
// whole batch, rank 1 on its rows of it alone (StepRows), as the daemon's
// ranks do.
void ExpectRanksTrainLikeSlots(const std::string& onnx, const OptimizerConfig& optimizer,
                               int64_t batch, const Shape& row, int classes,
                               Slots kind = Slots::kCpu) {
  std::unique_ptr<DataParallelTrainer> job =
      MakeTrainer(1, optimizer, testing::LoadForTraining(onnx), Ranks(), {}, kind);
  std::unique_ptr<DataParallelTrainer> one =
      MakeTrainer(2, optimizer, testing::LoadForTraining(onnx), nullptr);
  ASSERT_TRUE(job != nullptr && one != nullptr);
  for (int step = 0; step < 5; ++step) {
    Shape shape = row;
    shape.insert(shape.begin(), batch);
    const Tensor images = testing::RandomTensor(shape, 100 + step);
    const Tensor labels = testing::ClassLabels(batch, classes, step);
    absl::StatusOr<DataParallelTrainer::StepResult> a;
    if (Ranks()->rank() == 0) {
      a = job->Step({images}, labels);
    } else {
      const DataParallelTrainer::RowRange rows = job->RowsOfRank(batch, 1);
      a = job->StepRows(rows.first, batch, {Rows(images, rows.first, rows.end)},
                        Rows(labels, rows.first, rows.end));
    }
    absl::StatusOr<DataParallelTrainer::StepResult> b = one->Step({images}, labels);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "batch " << batch << ", step " << step;
    EXPECT_EQ(a->accuracy, b->accuracy) << "batch " << batch << ", step " << step;
    EXPECT_EQ(a->step, step + 1);
    EXPECT_EQ(a->samples, batch);
    // This rank's rows only: rank 1 has none of a batch of 1.
    ASSERT_LE(a->slices.size(), 1u);
    // Every rank reports the job's slices, its own and the others', in the
    // batch's rows: together they split it as one process of two slots does.
    EXPECT_EQ(a->rank, Ranks()->rank());
    const int64_t first = Ranks()->rank() == 0 ? 0 : job->RowsOfRank(batch, 1).first;
    std::vector<std::pair<int64_t, int64_t>> job_rows, one_rows;
    for (const DataParallelTrainer::SliceResult& s : a->slices) {
      job_rows.emplace_back(first + s.slice.begin, first + s.slice.end);
    }
    for (const RankSlice& s : a->other_ranks) {
      EXPECT_EQ(s.rank, 1 - Ranks()->rank());
      EXPECT_FALSE(s.device.empty());
      EXPECT_GE(s.compute_seconds, 0);
      job_rows.emplace_back(s.begin, s.end);
    }
    std::sort(job_rows.begin(), job_rows.end());
    for (const DataParallelTrainer::SliceResult& s : b->slices) {
      one_rows.emplace_back(s.slice.begin, s.slice.end);
    }
    EXPECT_EQ(job_rows, one_rows) << "batch " << batch << ", step " << step;
  }
  ExpectSameWeights(*job, *one, batch);
}

std::vector<OptimizerConfig> Optimizers() {
  OptimizerConfig sgd;
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::kAdam;
  adam.learning_rate = 0.01f;
  return {sgd, adam};
}

TEST(MpiTrainingRanksTest, EveryRankKnowsTheJobsSlots) {
  std::shared_ptr<MpiTrainingRanks> ranks = Ranks();
  ASSERT_NE(ranks, nullptr);
  ASSERT_EQ(ranks->size(), 2) << "run under mpirun -np 2";
  EXPECT_EQ(ranks->slot_weights(), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(ranks->slot_ranks(), (std::vector<int>{0, 1}));
  EXPECT_EQ(ranks->leads(), ranks->rank() == 0);
}

TEST(MpiTrainingRanksTest, TwoRanksTrainLikeOneProcessWithTwoSlots) {
  ASSERT_NE(Ranks(), nullptr);
  for (const OptimizerConfig& optimizer : Optimizers()) {
    for (int64_t batch : {7, 2, 64, 1}) {
      ExpectRanksTrainLikeSlots(testing::ConvNetOnnx(7), optimizer, batch, {2, 6, 6}, 4);
    }
  }
}

// The PyTorch-exported CNN with BatchNormalization (SyncBatchNorm: the
// statistics of the whole step, summed across ranks) and Dropout p = 0.3
// (masks keyed by global row).
TEST(MpiTrainingRanksTest, SyncBatchNormAndDropoutAcrossRanksTrainLikeSlots) {
  ASSERT_NE(Ranks(), nullptr);
  const std::string onnx = BatchNormDropoutOnnx();
  ASSERT_FALSE(onnx.empty()) << "rank 0 could not export the model";
  for (int64_t batch : {7, 2, 64}) {
    ExpectRanksTrainLikeSlots(onnx, Optimizers()[0], batch, {1, 8, 8}, 3);
  }
}

// A step that fails on one rank (a label out of range on rank 1's rows
// only is caught on every rank, since every rank sees the whole batch; so
// the failure here is rank 1's own: it was given an input rank 0 was not)
// fails on both, naming the rank, and changes nothing anywhere.
TEST(MpiTrainingRanksTest, AStepThatFailsOnOneRankFailsOnAllAndChangesNothing) {
  ASSERT_NE(Ranks(), nullptr);
  std::unique_ptr<DataParallelTrainer> job =
      MakeTrainer(1, Optimizers()[0], testing::LoadForTraining(testing::ConvNetOnnx(7)), Ranks());
  ASSERT_NE(job, nullptr);
  const std::vector<Tensor> before = Weights(*job);
  Tensor labels = testing::ClassLabels(4, 4, 0);
  if (Ranks()->rank() == 1) labels.data<int64_t>()[3] = 9;
  absl::StatusOr<DataParallelTrainer::StepResult> step =
      job->Step({testing::RandomTensor({4, 2, 6, 6}, 1)}, labels);
  ASSERT_FALSE(step.ok());
  if (Ranks()->rank() == 0) {
    // Rank 0 learns it from rank 1's part of the step.
    EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument) << step.status();
    EXPECT_NE(step.status().message().find("rank 1 of 2: "), std::string::npos) << step.status();
  }
  EXPECT_NE(step.status().message().find("must be a class in [0, 4), received 9"),
            std::string::npos)
      << step.status();
  EXPECT_EQ(job->step(), 0);
  const std::vector<Tensor> after = Weights(*job);
  for (size_t w = 0; w < after.size(); ++w) {
    EXPECT_EQ(std::memcmp(after[w].raw_data(), before[w].raw_data(), after[w].byte_size()), 0);
  }
  // And the group goes on: the next good step trains on both.
  absl::StatusOr<DataParallelTrainer::StepResult> next =
      job->Step({testing::RandomTensor({4, 2, 6, 6}, 1)}, testing::ClassLabels(4, 4, 0));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->step, 1);
}

// Rows that are not the rank's part of rank 0's batch fail the step on
// both ranks, naming what the part should have been, and change nothing.
TEST(MpiTrainingRanksTest, RowsThatAreNotTheRanksPartAreRefusedOnEveryRank) {
  ASSERT_NE(Ranks(), nullptr);
  std::unique_ptr<DataParallelTrainer> job =
      MakeTrainer(1, Optimizers()[0], testing::LoadForTraining(testing::ConvNetOnnx(7)), Ranks());
  ASSERT_NE(job, nullptr);
  const Tensor images = testing::RandomTensor({4, 2, 6, 6}, 1);
  const Tensor labels = testing::ClassLabels(4, 4, 0);
  absl::StatusOr<DataParallelTrainer::StepResult> step =
      Ranks()->rank() == 0
          ? job->Step({images}, labels)
          : job->StepRows(1, 4, {Rows(images, 1, 3)}, Rows(labels, 1, 3));  // Rows 2 and 3 are.
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument) << step.status();
  EXPECT_NE(step.status().message().find("this rank's part of a batch of 4 rows is 2 rows from row "
                                         "2, received 2 rows from row 1"),
            std::string::npos)
      << step.status();
  if (Ranks()->rank() == 0) {
    EXPECT_NE(step.status().message().find("rank 1 of 2: "), std::string::npos) << step.status();
  }
  EXPECT_EQ(job->step(), 0);
}

// Per-rank shards (one data loader per rank): rank 0 steps on the first
// `first` rows of each batch, rank 1 on the rest; one process of two slots
// whose weights cut the batch at the same row trains alike, bit for bit.
void ExpectShardsTrainLikeSlots(const std::string& onnx, const OptimizerConfig& optimizer,
                                int64_t batch, int64_t first, const Shape& row, int classes,
                                Slots kind = Slots::kCpu) {
  std::unique_ptr<DataParallelTrainer> job =
      MakeTrainer(1, optimizer, testing::LoadForTraining(onnx), Ranks(), {}, kind);
  std::unique_ptr<DataParallelTrainer> one =
      MakeTrainer(2, optimizer, testing::LoadForTraining(onnx), nullptr,
                  {static_cast<double>(first), static_cast<double>(batch - first)});
  ASSERT_TRUE(job != nullptr && one != nullptr);
  const bool rank0 = Ranks()->rank() == 0;
  for (int step = 0; step < 5; ++step) {
    Shape shape = row;
    shape.insert(shape.begin(), batch);
    const Tensor images = testing::RandomTensor(shape, 200 + step);
    const Tensor labels = testing::ClassLabels(batch, classes, step);
    const int64_t begin = rank0 ? 0 : first, end = rank0 ? first : batch;
    absl::StatusOr<DataParallelTrainer::StepResult> a =
        job->StepShard(step + 1, 0, {Rows(images, begin, end)}, Rows(labels, begin, end));
    absl::StatusOr<DataParallelTrainer::StepResult> b = one->Step({images}, labels);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "batch " << batch << ", step " << step;
    EXPECT_EQ(a->accuracy, b->accuracy) << "batch " << batch << ", step " << step;
    EXPECT_EQ(a->samples, batch);
    EXPECT_EQ(a->step, step + 1);
  }
  ExpectSameWeights(*job, *one, batch);
}

TEST(MpiTrainingRanksTest, ShardsOfEachRankTrainLikeOneProcessWithTwoSlots) {
  ASSERT_NE(Ranks(), nullptr);
  for (const OptimizerConfig& optimizer : Optimizers()) {
    for (const auto& [batch, first] :
         std::vector<std::pair<int64_t, int64_t>>{{7, 4}, {7, 2}, {2, 1}, {64, 40}}) {
      ExpectShardsTrainLikeSlots(testing::ConvNetOnnx(7), optimizer, batch, first, {2, 6, 6}, 4);
    }
  }
  // BatchNormalization (SyncBatchNorm across the ranks' shards) and Dropout.
  const std::string onnx = BatchNormDropoutOnnx();
  ASSERT_FALSE(onnx.empty()) << "rank 0 could not export the model";
  ExpectShardsTrainLikeSlots(onnx, Optimizers()[0], 9, 5, {1, 8, 8}, 3);
}

// Shards of different steps, or of a step that is not the next, fail on
// every rank, naming what disagrees, and change nothing; the job goes on.
TEST(MpiTrainingRanksTest, ShardsOfDifferentStepsAreRefusedOnEveryRank) {
  ASSERT_NE(Ranks(), nullptr);
  std::unique_ptr<DataParallelTrainer> job =
      MakeTrainer(1, Optimizers()[0], testing::LoadForTraining(testing::ConvNetOnnx(7)), Ranks());
  ASSERT_NE(job, nullptr);
  const std::vector<Tensor> before = Weights(*job);
  const Tensor images = testing::RandomTensor({3, 2, 6, 6}, 1);
  const Tensor labels = testing::ClassLabels(3, 4, 0);
  const bool rank0 = Ranks()->rank() == 0;
  absl::StatusOr<DataParallelTrainer::StepResult> mixed =
      job->StepShard(rank0 ? 1 : 2, 0, {images}, labels);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kFailedPrecondition) << mixed.status();
  EXPECT_NE(mixed.status().message().find("rank 1 of 2 was sent its shard of step 2 and rank 0 "
                                          "of step 1"),
            std::string::npos)
      << mixed.status();
  absl::StatusOr<DataParallelTrainer::StepResult> unlike =
      job->StepShard(1, rank0 ? 7 : 8, {images}, labels);
  EXPECT_EQ(unlike.status().code(), absl::StatusCode::kFailedPrecondition) << unlike.status();
  EXPECT_NE(unlike.status().message().find("rank 1 of 2 trains with another configuration"),
            std::string::npos)
      << unlike.status();
  absl::StatusOr<DataParallelTrainer::StepResult> ahead = job->StepShard(5, 0, {images}, labels);
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kFailedPrecondition) << ahead.status();
  EXPECT_NE(ahead.status().message().find("shards of step 5, but the job's next step is 1"),
            std::string::npos)
      << ahead.status();
  EXPECT_EQ(job->step(), 0);
  const std::vector<Tensor> after = Weights(*job);
  for (size_t w = 0; w < after.size(); ++w) {
    EXPECT_EQ(std::memcmp(after[w].raw_data(), before[w].raw_data(), after[w].byte_size()), 0);
  }
  absl::StatusOr<DataParallelTrainer::StepResult> next = job->StepShard(1, 0, {images}, labels);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->step, 1);
  EXPECT_EQ(next->samples, 6);
}

// GPU slots across ranks, without a GPU: each rank's slot is a stand-in
// for a GPU slot, so the trainer takes its GPU paths (gradients reduced
// bucket by bucket during the backward pass by the slots' reduction, the
// optimizer's kernels on the slot's device, running statistics read back
// from it before they cross the ranks), with a reduction that sums across
// the ranks on the host where NCCL would. Two such ranks train bit for bit
// like one process of two CPU slots, whole batches and shards alike.
TEST(MpiTrainingRanksTest, GpuSlotPathsAcrossRanksTrainLikeOneProcessWithTwoSlots) {
  ASSERT_NE(Ranks(), nullptr);
  for (const OptimizerConfig& optimizer : Optimizers()) {
    for (int64_t batch : {7, 1}) {
      ExpectRanksTrainLikeSlots(testing::ConvNetOnnx(7), optimizer, batch, {2, 6, 6}, 4,
                                Slots::kGpuStandIns);
    }
    ExpectShardsTrainLikeSlots(testing::ConvNetOnnx(7), optimizer, 7, 4, {2, 6, 6}, 4,
                               Slots::kGpuStandIns);
  }
  const std::string onnx = BatchNormDropoutOnnx();
  ASSERT_FALSE(onnx.empty()) << "rank 0 could not export the model";
  ExpectRanksTrainLikeSlots(onnx, Optimizers()[0], 7, {1, 8, 8}, 3, Slots::kGpuStandIns);
  ExpectShardsTrainLikeSlots(onnx, Optimizers()[0], 9, 5, {1, 8, 8}, 3, Slots::kGpuStandIns);
}

// A rank on GPU slots and one on CPU slots would each wait for the other's
// kind of reduction: their first step fails on both, naming them, before
// either waits; later steps fail alike, and nothing changes.
TEST(MpiTrainingRanksTest, RanksOnDifferentKindsOfSlotsAreRefusedOnEveryRank) {
  ASSERT_NE(Ranks(), nullptr);
  const bool rank0 = Ranks()->rank() == 0;
  std::unique_ptr<DataParallelTrainer> job =
      MakeTrainer(1, Optimizers()[0], testing::LoadForTraining(testing::ConvNetOnnx(7)), Ranks(),
                  {}, rank0 ? Slots::kGpuStandIns : Slots::kCpu);
  ASSERT_NE(job, nullptr);
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<DataParallelTrainer::StepResult> step =
        job->Step({testing::RandomTensor({4, 2, 6, 6}, 1)}, testing::ClassLabels(4, 4, 0));
    EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
    EXPECT_NE(step.status().message().find("rank 1 of 2 sums its gradients on CPU slots (the "
                                           "host) and rank 0 on GPU slots (NCCL)"),
              std::string::npos)
        << step.status();
  }
  EXPECT_EQ(job->step(), 0);
}

// Ranks started from other weights (another model or checkpoint), or
// resumed at other steps, would train apart: their first step fails on
// every rank, naming what differs, and nothing changes.
TEST(MpiTrainingRanksTest, RanksFromOtherWeightsOrStepsAreRefusedOnEveryRank) {
  ASSERT_NE(Ranks(), nullptr);
  const bool rank0 = Ranks()->rank() == 0;
  const Tensor images = testing::RandomTensor({4, 2, 6, 6}, 1);
  const Tensor labels = testing::ClassLabels(4, 4, 0);
  std::unique_ptr<DataParallelTrainer> weights = MakeTrainer(
      1, Optimizers()[0], testing::LoadForTraining(testing::ConvNetOnnx(rank0 ? 7 : 8)), Ranks());
  ASSERT_NE(weights, nullptr);
  absl::StatusOr<DataParallelTrainer::StepResult> step = weights->Step({images}, labels);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  EXPECT_NE(step.status().message().find("rank 1 of 2 starts from other weights than rank 0"),
            std::string::npos)
      << step.status();
  EXPECT_EQ(weights->step(), 0);

  std::unique_ptr<DataParallelTrainer> steps =
      MakeTrainer(1, Optimizers()[0], testing::LoadForTraining(testing::ConvNetOnnx(7)), Ranks());
  ASSERT_NE(steps, nullptr);
  ASSERT_TRUE(steps->Resume(rank0 ? 4 : 3, {}).ok());
  step = steps->Step({images}, labels);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  EXPECT_NE(step.status().message().find("rank 1 of 2 is at step 3 and rank 0 at step 4"),
            std::string::npos)
      << step.status();
}

}  // namespace
}  // namespace replicad
