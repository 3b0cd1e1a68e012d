// `ps` reduction with slots whose memory the host does not read, without a
// GPU: device-memory stand-ins (tests/testing/device_memory_stand_in.h) take
// the GPU slots' paths (the slot copies its gradients to the server, and the
// server's weights back) with CPU kernels, so they train bit for bit like
// CPU slots under allreduce, alone or beside CPU slots; so does a server on
// a stand-in (a GPU server's paths: its sums by Add and Mul kernels, its
// optimizer by the replicad.OptimizerStep kernel, on its own device).
// data_parallel_trainer_gpu_test covers a server on cuda:0.

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/upcoming_batch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/device_memory_stand_in.h"
#include "tests/testing/host_sum_slot_all_reduce.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// One slot per character of `layout`: 'c' a CPU slot, 'd' a stand-in for a
// GPU slot on cuda:0. With `parameter_server`, `ps` reduction through cpu:0,
// or through a stand-in for cuda:1 with `server_on_stand_in`.
// `devices`, if given, receives the slots' devices and then the server's.
// `fault`, if given, is injected into slot 0's stand-in. fp16 `precision`
// starts from a loss scale of 2^20 (the first steps overflow) and doubles
// it after 2 finite steps. Stand-ins under allreduce sum through
// host_sum_slot_all_reduce.h (NCCL's part in the trainer's GPU path).
// `optimizer`, if given, replaces Adam at 0.01.
absl::StatusOr<std::unique_ptr<DataParallelTrainer>> MakeTrainer(
    const std::string& layout, bool parameter_server, std::vector<Device*>* devices = nullptr,
    std::shared_ptr<testing::InjectedFault> fault = nullptr, bool server_on_stand_in = false,
    ComputePrecision precision = ComputePrecision::kFloat32,
    const OptimizerConfig* optimizer = nullptr) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<TrainerSlot> slots;
  for (size_t s = 0; s < layout.size(); ++s) {
    std::unique_ptr<Device> device = CreateCpuDevice(cpu, {1});
    DeviceId id = cpu.id;
    if (layout[s] == 'd') {
      device = testing::MakeDeviceMemoryStandIn(std::move(device), 0, 0, s == 0 ? fault : nullptr);
      id = device->info().id;
    }
    if (devices != nullptr) devices->push_back(device.get());
    slots.push_back({SlotAssignment{"r" + std::to_string(s), id, 1.0}, std::move(device)});
  }
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"};
  options.optimizer.kind = OptimizerConfig::Kind::kAdam;
  options.optimizer.learning_rate = 0.01f;
  if (optimizer != nullptr) options.optimizer = *optimizer;
  options.seed = 5;
  options.precision = precision;
  options.loss_scaling = {1048576.0f, 2};
  std::optional<ParameterServerDevice> server;
  if (parameter_server) {
    server = ParameterServerDevice{cpu.id, CreateCpuDevice(cpu, {1})};
    if (server_on_stand_in) {
      server->device = testing::MakeDeviceMemoryStandIn(std::move(server->device), 1);
      server->device_id = server->device->info().id;
    }
    if (devices != nullptr) devices->push_back(server->device.get());
  }
  TrainerReduction reduction;
  reduction.parameter_server = std::move(server);
  reduction.slot_all_reduce = [](const std::vector<Device*>& slots,
                                 const SlotAllReducePeers* peers) {
    return absl::StatusOr<std::unique_ptr<SlotAllReduce>>(
        testing::MakeHostSumSlotAllReduce(static_cast<int>(slots.size()), peers));
  };
  return DataParallelTrainer::Create(testing::LoadForTraining(testing::ConvNetOnnx(7)),
                                     std::move(slots), options, std::move(reduction));
}

void ExpectSameBits(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t t = 0; t < a.size(); ++t) {
    EXPECT_EQ(std::memcmp(a[t].raw_data(), b[t].raw_data(), a[t].byte_size()), 0)
        << what << ", tensor " << t;
  }
}

// 4 steps of `batch` rows on `ps` and on `cpu` (CPU slots under allreduce,
// as many): the same losses and every slot's weights, bit for bit.
void ExpectTrainsLikeCpuSlots(DataParallelTrainer& ps, DataParallelTrainer& cpu, int slots,
                              int64_t batch, const std::string& what) {
  for (int step = 0; step < 4; ++step) {
    const Tensor images = testing::RandomTensor({batch, 2, 6, 6}, 60 + step);
    absl::StatusOr<DataParallelTrainer::StepResult> a =
        cpu.Step({images}, testing::ClassLabels(batch, 4, step));
    absl::StatusOr<DataParallelTrainer::StepResult> b =
        ps.Step({images}, testing::ClassLabels(batch, 4, step));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << what << ": " << b.status();
    EXPECT_EQ(a->loss, b->loss) << what << ", step " << step;
  }
  for (int s = 0; s < slots; ++s) {
    ExpectSameBits(ps.SlotParameters(s).value(), cpu.SlotParameters(s).value(),
                   absl::StrCat(what, ", slot ", s));
  }
}

// Batch 7 splits unevenly; batch 1 leaves slots without rows, which must
// still take the server's weights.
TEST(DataParallelTrainerStandInTest, DeviceMemorySlotsThroughAServerTrainLikeCpuSlots) {
  for (const std::string layout : {"dd", "cd", "dcd"}) {
    for (int64_t batch : {7, 1}) {
      const std::string what = absl::StrCat("slots ", layout, ", batch ", batch);
      absl::StatusOr<std::unique_ptr<DataParallelTrainer>> cpu =
          MakeTrainer(std::string(layout.size(), 'c'), false);
      absl::StatusOr<std::unique_ptr<DataParallelTrainer>> ps = MakeTrainer(layout, true);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      ASSERT_TRUE(ps.ok()) << ps.status();
      ExpectTrainsLikeCpuSlots(**ps, **cpu, static_cast<int>(layout.size()), batch, what);
    }
  }
}

// fp16 on device-memory slots: the loss scale is copied to each slot, and
// the summed gradients are checked for overflow on the host (a server in
// host memory) or, under allreduce, on the first slot's device
// (replicad.AllFinite over its summed arena), so every step (skipped ones
// first, from 2^20) and the weights are those of CPU slots under allreduce,
// bit for bit. A server on a device sums after the trainer's checks: fp16
// is refused there.
class Float16StandInTest : public ::testing::TestWithParam<bool> {};

TEST_P(Float16StandInTest, TrainsLikeCpuSlots) {
  const bool parameter_server = GetParam();
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> cpu =
      MakeTrainer("cc", false, nullptr, nullptr, false, ComputePrecision::kFloat16);
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> ps =
      MakeTrainer("dd", parameter_server, nullptr, nullptr, false, ComputePrecision::kFloat16);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(ps.ok()) << ps.status();
  int skipped = 0, applied = 0;
  for (int step = 0; step < 8; ++step) {
    const Tensor images = testing::RandomTensor({7, 2, 6, 6}, 80 + step);
    absl::StatusOr<DataParallelTrainer::StepResult> a =
        (*cpu)->Step({images}, testing::ClassLabels(7, 4, step));
    absl::StatusOr<DataParallelTrainer::StepResult> b =
        (*ps)->Step({images}, testing::ClassLabels(7, 4, step));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "step " << step;
    EXPECT_EQ(a->loss_scale, b->loss_scale) << "step " << step;
    EXPECT_EQ(a->skipped, b->skipped) << "step " << step;
    (a->skipped.empty() ? applied : skipped)++;
  }
  EXPECT_GT(skipped, 0);
  EXPECT_GT(applied, 0);
  for (int s = 0; s < 2; ++s) {
    ExpectSameBits((*ps)->SlotParameters(s).value(), (*cpu)->SlotParameters(s).value(),
                   absl::StrCat("fp16, slot ", s));
  }
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> device_server =
      MakeTrainer("dd", true, nullptr, nullptr, true, ComputePrecision::kFloat16);
  EXPECT_EQ(device_server.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(device_server.status().message()),
              AllOf(HasSubstr("a parameter server on cuda:1 sums after that check"),
                    HasSubstr("fp16 trains with allreduce or a server on cpu:0")));
}

INSTANTIATE_TEST_SUITE_P(HostServerAndAllreduce, Float16StandInTest, ::testing::Bool());

// An update that would overflow finite gradients (SGD at 1e4 on inputs of
// 3e35): device-memory slots under allreduce find it by the optimizer's dry
// run on the device (replicad.OptimizerDryRun) and refuse the step as CPU
// slots do, with the same reason, leaving every weight as it was; the next
// good step trains.
TEST(DataParallelTrainerStandInTest, AnUpdateThatWouldOverflowIsRefusedOnTheDevice) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1e4f;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> cpu =
      MakeTrainer("cc", false, nullptr, nullptr, false, ComputePrecision::kFloat32, &sgd);
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> device =
      MakeTrainer("dd", false, nullptr, nullptr, false, ComputePrecision::kFloat32, &sgd);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(device.ok()) << device.status();
  const std::vector<Tensor> before = (*device)->SlotParameters(1).value();
  Tensor large = Tensor::Host(DType::kFloat32, {7, 2, 6, 6});
  for (int64_t i = 0; i < large.num_elements(); ++i) large.data<float>()[i] = 3e35f;
  absl::StatusOr<DataParallelTrainer::StepResult> a =
      (*cpu)->Step({large}, testing::ClassLabels(7, 4, 0));
  absl::StatusOr<DataParallelTrainer::StepResult> b =
      (*device)->Step({large}, testing::ClassLabels(7, 4, 0));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status(), a.status());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("the update would make element"));
  EXPECT_EQ((*device)->step(), 0);
  for (int slot : {0, 1}) {
    ExpectSameBits((*device)->SlotParameters(slot).value(), before,
                   absl::StrCat("refused, slot ", slot));
  }
  ExpectTrainsLikeCpuSlots(**device, **cpu, 2, 7, "after the refused step");
}

TEST(DataParallelTrainerStandInTest, AServerOnAStandInTrainsLikeCpuSlots) {
  for (const std::string layout : {"dd", "cd"}) {
    const std::string what = absl::StrCat("slots ", layout, ", server on a stand-in");
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> cpu =
        MakeTrainer(std::string(layout.size(), 'c'), false);
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> ps =
        MakeTrainer(layout, true, nullptr, nullptr, /*server_on_stand_in=*/true);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(ps.ok()) << what << ": " << ps.status();
    ExpectTrainsLikeCpuSlots(**ps, **cpu, static_cast<int>(layout.size()), 7, what);
    // The optimizer's state, read back from the server's device.
    absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state = (*ps)->OptimizerState();
    absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> want = (*cpu)->OptimizerState();
    ASSERT_TRUE(state.ok() && want.ok());
    ASSERT_EQ(state->size(), want->size());
    for (size_t k = 0; k < state->size(); ++k) {
      EXPECT_EQ((*state)[k].first, (*want)[k].first);
      EXPECT_EQ(std::memcmp((*state)[k].second.raw_data(), (*want)[k].second.raw_data(),
                            (*want)[k].second.byte_size()),
                0)
          << what << ", " << (*want)[k].first;
    }
  }
}

// The server's copies of the gradients are made once, with the trainer: a
// step allocates nothing on any device once its slice shapes were planned.
TEST(DataParallelTrainerStandInTest, StepsAllocateNothing) {
  std::vector<Device*> devices;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer = MakeTrainer("cd", true, &devices);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)
                  ->Step({testing::RandomTensor({7, 2, 6, 6}, 1)}, testing::ClassLabels(7, 4, 0))
                  .ok());
  std::vector<uint64_t> allocations;
  for (Device* device : devices) allocations.push_back(device->allocation_count());
  for (int step = 1; step < 4; ++step) {
    ASSERT_TRUE((*trainer)
                    ->Step({testing::RandomTensor({7, 2, 6, 6}, 1 + step)},
                           testing::ClassLabels(7, 4, step))
                    .ok());
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(devices[d]->allocation_count(), allocations[d]) << "device " << d;
  }
}

// A failed step (a label out of range) changes no slot, and the trainer
// then still trains.
TEST(DataParallelTrainerStandInTest, BadLabelsChangeNothing) {
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer = MakeTrainer("cd", true);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  testing::ExpectBadLabelsChangeNothing(**trainer, 1);
}

// allreduce sums where the slots are, so it takes no mix; the error says
// what does.
TEST(DataParallelTrainerStandInTest, MixedSlotsWithAllreduceAreUnimplemented) {
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> mixed = MakeTrainer("cd", false);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(mixed.status().message()),
              AllOf(HasSubstr("slot r1 is on cuda:0 while slot r0 is on cpu:0"),
                    HasSubstr("reduction 'ps'")));
}

// Fault injection: slot 0's device is lost while a step copies to it. The
// step fails naming the device and changes nothing (the other slot's
// weights, the step count), and what cannot be copied off the lost slot is
// an error, never weights to checkpoint.
TEST(DataParallelTrainerStandInTest, AFailingCopyFailsTheStepAndChangesNothing) {
  auto fault = std::make_shared<testing::InjectedFault>();
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
      MakeTrainer("dd", /*parameter_server=*/true, nullptr, fault);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const Tensor labels = testing::ClassLabels(6, 4, 0);
  ASSERT_TRUE((*trainer)->Step({testing::RandomTensor({6, 2, 6, 6}, 1)}, labels).ok());
  const std::vector<Tensor> before = (*trainer)->SlotParameters(1).value();
  ASSERT_TRUE((*trainer)->CurrentModel().ok());
  fault->copies_before_failure = 0;
  absl::StatusOr<DataParallelTrainer::StepResult> failed =
      (*trainer)->Step({testing::RandomTensor({6, 2, 6, 6}, 2)}, labels);
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("injected fault"));
  EXPECT_EQ((*trainer)->step(), 1);
  ExpectSameBits(before, (*trainer)->SlotParameters(1).value(), "slot 1 after the failed step");
  absl::StatusOr<std::vector<Tensor>> lost = (*trainer)->SlotParameters(0);
  EXPECT_FALSE(lost.ok());
  EXPECT_THAT(lost.status().message(),
              AllOf(HasSubstr("copying the weights"), HasSubstr("injected fault")));
  EXPECT_FALSE((*trainer)->CurrentModel().ok());
}

// A batch of `rows` rows: the images and labels of seed `seed`.
std::shared_ptr<UpcomingBatch> Batch(int64_t rows, uint64_t seed) {
  auto batch = std::make_shared<UpcomingBatch>();
  batch->inputs = {testing::RandomTensor({rows, 2, 6, 6}, 300 + seed)};
  batch->targets = testing::ClassLabels(rows, 4, seed);
  return batch;
}

// Input prefetch (input_prefetch.h): with the next batch posted before each
// step, the slots in device memory upload it while the step computes, and
// the next step reads those copies, training bit for bit as without them
// (the stand-ins' upload lane is a thread of its own: a compute lane that
// did not wait for the upload would read rows half copied). CPU slots read
// in place and never prefetch. The row counts change from step to step (7
// splits unevenly, 1 leaves a slot without rows).
TEST(DataParallelTrainerStandInTest, UpcomingBatchesAreUploadedAheadAndTrainTheSame) {
  for (const std::string layout : {"d", "dd", "cd"}) {
    // Allreduce trains slots of one kind; a mix goes through a server.
    const bool server = layout == "cd";
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> ahead = MakeTrainer(layout, server);
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> plain = MakeTrainer(layout, server);
    ASSERT_TRUE(ahead.ok()) << ahead.status();
    ASSERT_TRUE(plain.ok()) << plain.status();
    auto upcoming = std::make_shared<UpcomingBatches>();
    (*ahead)->ExpectBatchesFrom(upcoming);
    const std::vector<int64_t> rows = {7, 7, 5, 1, 8, 8};
    std::vector<std::shared_ptr<UpcomingBatch>> batches;
    for (size_t k = 0; k < rows.size(); ++k) batches.push_back(Batch(rows[k], k));
    for (size_t k = 0; k < batches.size(); ++k) {
      const std::string what = absl::StrCat(layout, ", step ", k);
      upcoming->Expect(k + 1 < batches.size() ? batches[k + 1] : nullptr);
      absl::StatusOr<DataParallelTrainer::StepResult> a =
          (*ahead)->Step(batches[k]->inputs, batches[k]->targets);
      absl::StatusOr<DataParallelTrainer::StepResult> b =
          (*plain)->Step(batches[k]->inputs, batches[k]->targets);
      ASSERT_TRUE(a.ok()) << what << ": " << a.status();
      ASSERT_TRUE(b.ok()) << what << ": " << b.status();
      EXPECT_EQ(a->loss, b->loss) << what;
      for (const DataParallelTrainer::SliceResult& slice : a->slices) {
        const bool device_memory = layout[slice.slice.slot] == 'd';
        EXPECT_EQ(slice.input_prefetched, device_memory && k > 0)
            << what << ", slot " << slice.slice.slot;
      }
      for (const DataParallelTrainer::SliceResult& slice : b->slices) {
        EXPECT_FALSE(slice.input_prefetched) << what;
      }
    }
    for (size_t s = 0; s < layout.size(); ++s) {
      ExpectSameBits((*ahead)->SlotParameters(s).value(), (*plain)->SlotParameters(s).value(),
                     absl::StrCat(layout, ", slot ", s));
    }
  }
}

// Only the very tensors posted are taken from the copies: a step on other
// tensors (even with the same values), or on the posted batch after
// another step came between, copies its own rows. A posted batch whose
// tensors disagree on their rows is not uploaded; its step fails as ever.
TEST(DataParallelTrainerStandInTest, OnlyThePostedTensorsAreTakenFromTheCopies) {
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> ahead = MakeTrainer("dd", false);
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> plain = MakeTrainer("dd", false);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto upcoming = std::make_shared<UpcomingBatches>();
  (*ahead)->ExpectBatchesFrom(upcoming);
  auto step = [&](const UpcomingBatch& batch, bool prefetched, const std::string& what) {
    absl::StatusOr<DataParallelTrainer::StepResult> a = (*ahead)->Step(batch.inputs, batch.targets);
    absl::StatusOr<DataParallelTrainer::StepResult> b = (*plain)->Step(batch.inputs, batch.targets);
    ASSERT_TRUE(a.ok()) << what << ": " << a.status();
    ASSERT_TRUE(b.ok()) << what << ": " << b.status();
    EXPECT_EQ(a->loss, b->loss) << what;
    for (const DataParallelTrainer::SliceResult& slice : a->slices) {
      EXPECT_EQ(slice.input_prefetched, prefetched) << what << ", slot " << slice.slice.slot;
    }
  };
  const std::shared_ptr<UpcomingBatch> first = Batch(6, 1), posted = Batch(6, 2);
  upcoming->Expect(posted);
  step(*first, false, "the first step");
  upcoming->Expect(nullptr);
  // The same values in tensors of their own.
  step(*Batch(6, 2), false, "a copy of the posted batch");
  // Uploaded during the step before the one before: gone.
  step(*posted, false, "the posted batch, a step late");
  upcoming->Expect(posted);
  step(*Batch(6, 3), false, "another batch");
  step(*posted, true, "the posted batch, next");

  auto ragged = std::make_shared<UpcomingBatch>();
  ragged->inputs = {testing::RandomTensor({6, 2, 6, 6}, 9)};
  ragged->targets = testing::ClassLabels(5, 4, 9);
  upcoming->Expect(ragged);
  step(*Batch(6, 4), false, "before a ragged batch");
  absl::StatusOr<DataParallelTrainer::StepResult> refused =
      (*ahead)->Step(ragged->inputs, ragged->targets);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  for (int s = 0; s < 2; ++s) {
    ExpectSameBits((*ahead)->SlotParameters(s).value(), (*plain)->SlotParameters(s).value(),
                   absl::StrCat("slot ", s));
  }
}

// The two sets of copies are allocated once: steps with batches posted
// ahead allocate nothing more once both exist.
TEST(DataParallelTrainerStandInTest, PrefetchingStepsAllocateNothingOnceWarm) {
  std::vector<Device*> devices;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer = MakeTrainer("dd", false, &devices);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto upcoming = std::make_shared<UpcomingBatches>();
  (*trainer)->ExpectBatchesFrom(upcoming);
  std::vector<std::shared_ptr<UpcomingBatch>> batches;
  for (int k = 0; k < 8; ++k) batches.push_back(Batch(7, k));
  std::vector<uint64_t> allocations;
  for (int k = 0; k + 1 < 8; ++k) {
    if (k == 3) {
      for (Device* device : devices) allocations.push_back(device->allocation_count());
    }
    upcoming->Expect(batches[k + 1]);
    ASSERT_TRUE((*trainer)->Step(batches[k]->inputs, batches[k]->targets).ok());
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(devices[d]->allocation_count(), allocations[d]) << "device " << d;
  }
}

}  // namespace
}  // namespace replicad
