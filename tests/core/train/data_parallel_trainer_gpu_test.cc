// Training on GPU slots is exact too: 1 and 2 slots on cuda:0 (which reduce
// on the GPU), and one slot per GPU when there are several (NCCL), train
// like one CPU slot on the whole batch; so do GPU slots and a mix of CPU and
// GPU slots through a parameter server on cpu:0 or cuda:0. The CPU and the
// GPU sum in different orders, so they agree within tolerances: losses
// within 1e-4 relative, every weight and running statistic within 1e-4
// relative L2 after 5 steps. Slots of one trainer agree bitwise. Skips
// without a GPU (CTest label gpu).

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/upcoming_batch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/local_gpus.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kLossTolerance = 1e-4;    // Relative.
constexpr double kWeightTolerance = 1e-4;  // Relative L2 per tensor.

std::vector<DeviceInfo> Gpus() { return testing::LocalGpus(); }

DeviceInfo Cpu() { return (*EnumerateDevices())[0]; }

// image [N,2,6,6] -> Conv -> BatchNormalization -> Relu -> Dropout(0.25) ->
// AveragePool -> Flatten -> Gemm -> logits: the training-only kernels the
// CPU-only ConvNet does not reach (BatchNormTrain/Grad with SyncBatchNorm,
// DropoutTrain, AveragePoolGrad).
std::string BatchNormNetOnnx() {
  OnnxModelBuilder b("bnnet", 14);
  b.AddInitializer("conv.w", testing::RandomTensor({4, 2, 3, 3}, 11));
  b.AddInitializer("bn.scale", testing::RandomTensor({4}, 12));
  b.AddInitializer("bn.bias", testing::RandomTensor({4}, 13));
  b.AddInitializer("bn.mean", testing::RandomTensor({4}, 14));
  Tensor variance = testing::RandomTensor({4}, 15);
  for (int64_t i = 0; i < 4; ++i) variance.data<float>()[i] = 1.0f + 0.25f * i;
  b.AddInitializer("bn.var", variance);
  b.AddInitializer("fc.w", testing::RandomTensor({3, 36}, 16));
  b.AddInitializer("fc.b", testing::RandomTensor({3}, 17));
  OnnxModelBuilder::SetInts(b.AddNode("Conv", {"image", "conv.w"}, {"c"}), "pads", {1, 1, 1, 1});
  // In training form, as torch.onnx.export writes it in training mode
  // (core/model/exporter_forms.h): batch statistics, random masks.
  OnnxModelBuilder::SetInt(
      b.AddNode("BatchNormalization", {"c", "bn.scale", "bn.bias", "bn.mean", "bn.var"}, {"n"}),
      "training_mode", 1);
  b.AddNode("Relu", {"n"}, {"r"});
  testing::AddTrainingDropout(b, "r", "d", 0.25f);
  onnx::NodeProto* pool = b.AddNode("AveragePool", {"d"}, {"p"});
  OnnxModelBuilder::SetInts(pool, "kernel_shape", {2, 2});
  OnnxModelBuilder::SetInts(pool, "strides", {2, 2});
  b.AddNode("Flatten", {"p"}, {"f"});
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"f", "fc.w", "fc.b"}, {"logits"}), "transB", 1);
  b.AddInput("image", DType::kFloat32, {kAnyDim, 2, 6, 6});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 3});
  return b.Serialize();
}

// Slots on `slots`; `ps` reduction with a parameter server on `ps`, if any.
// fp16 `precision` starts from a loss scale of 2^20 and doubles it after 2
// finite steps.
absl::StatusOr<std::unique_ptr<DataParallelTrainer>> MakeTrainer(
    const std::vector<DeviceInfo>& slots, const OptimizerConfig& optimizer, const std::string& onnx,
    const std::optional<DeviceInfo>& ps = std::nullopt,
    ComputePrecision precision = ComputePrecision::kFloat32) {
  std::vector<TrainerSlot> trainer_slots;
  for (size_t s = 0; s < slots.size(); ++s) {
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(slots[s], SlotOptions{});
    if (!device.ok()) return device.status();
    trainer_slots.push_back(
        {SlotAssignment{"r" + std::to_string(s), slots[s].id, 1.0}, *std::move(device)});
  }
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"};
  options.optimizer = optimizer;
  options.seed = 5;
  options.precision = precision;
  options.loss_scaling = {1048576.0f, 2};
  std::optional<ParameterServerDevice> server;
  if (ps) {
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*ps, SlotOptions{});
    if (!device.ok()) return device.status();
    server = ParameterServerDevice{ps->id, *std::move(device)};
  }
  TrainerReduction reduction;
  reduction.parameter_server = std::move(server);
  reduction.slot_all_reduce = &CreateSlotAllReduce;
  return DataParallelTrainer::Create(testing::LoadForTraining(onnx), std::move(trainer_slots),
                                     options, std::move(reduction));
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<Tensor> weights;  // Parameters, then buffers, of slot 0.
};

TrainedRun Train(const std::vector<DeviceInfo>& slots, const OptimizerConfig& optimizer,
                 const std::string& onnx, int classes, int64_t batch,
                 const std::optional<DeviceInfo>& ps = std::nullopt) {
  TrainedRun run;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
      MakeTrainer(slots, optimizer, onnx, ps);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return run;
  for (int step = 0; step < 5; ++step) {
    absl::StatusOr<DataParallelTrainer::StepResult> result =
        (*trainer)->Step({testing::RandomTensor({batch, 2, 6, 6}, 100 + step)},
                         testing::ClassLabels(batch, classes, step));
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return run;
    run.losses.push_back(result->loss);
  }
  run.weights = (*trainer)->SlotParameters(0).value();
  std::vector<Tensor> slot_buffers = (*trainer)->SlotBuffers(0).value();
  for (Tensor& b : slot_buffers) run.weights.push_back(std::move(b));
  for (size_t s = 1; s < slots.size(); ++s) {
    std::vector<Tensor> other = (*trainer)->SlotParameters(static_cast<int>(s)).value();
    std::vector<Tensor> other_buffers = (*trainer)->SlotBuffers(static_cast<int>(s)).value();
    for (Tensor& b : other_buffers) other.push_back(std::move(b));
    for (size_t w = 0; w < other.size(); ++w) {
      EXPECT_EQ(std::memcmp(other[w].raw_data(), run.weights[w].raw_data(), other[w].byte_size()),
                0)
          << "slot " << s << " differs from slot 0 in tensor " << w;
    }
  }
  return run;
}

// `run` trained like `cpu` (one CPU slot): losses and weights within the
// tolerances. `what` names the run in failures.
void ExpectTrainsLike(const TrainedRun& run, const TrainedRun& cpu, const std::string& what) {
  ASSERT_EQ(run.losses.size(), cpu.losses.size()) << what;
  for (size_t step = 0; step < cpu.losses.size(); ++step) {
    EXPECT_NEAR(run.losses[step], cpu.losses[step], kLossTolerance * std::fabs(cpu.losses[step]))
        << what << ", step " << step;
  }
  ASSERT_EQ(run.weights.size(), cpu.weights.size()) << what;
  for (size_t w = 0; w < cpu.weights.size(); ++w) {
    EXPECT_LE(testing::RelativeL2(run.weights[w], cpu.weights[w]), kWeightTolerance)
        << what << ", tensor " << w;
  }
}

struct TestModel {
  std::string name;
  std::string onnx;
  int classes;
};

std::vector<TestModel> Models() {
  return {{"convnet", testing::ConvNetOnnx(7), 4}, {"bnnet", BatchNormNetOnnx(), 3}};
}

class DataParallelTrainerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus_ = Gpus();
    if (gpus_.empty()) GTEST_SKIP() << "no CUDA device";
  }
  // The GPU layouts to check: 1 slot, 2 slots sharing cuda:0, and one slot
  // per GPU when there are several.
  std::vector<std::vector<DeviceInfo>> Layouts() const {
    std::vector<std::vector<DeviceInfo>> layouts = {{gpus_[0]}, {gpus_[0], gpus_[0]}};
    if (gpus_.size() > 1) layouts.push_back(gpus_);
    return layouts;
  }
  std::vector<DeviceInfo> gpus_;
};

TEST_F(DataParallelTrainerGpuTest, GpuSlotsTrainLikeOneCpuSlot) {
  for (const TestModel& model : Models()) {
    for (const OptimizerConfig& optimizer : testing::TrainingOptimizers()) {
      for (int64_t batch : {7, 64}) {
        const TrainedRun cpu = Train({Cpu()}, optimizer, model.onnx, model.classes, batch);
        ASSERT_EQ(cpu.losses.size(), 5u);
        for (const std::vector<DeviceInfo>& layout : Layouts()) {
          const TrainedRun gpu = Train(layout, optimizer, model.onnx, model.classes, batch);
          ExpectTrainsLike(
              gpu, cpu, absl::StrCat(model.name, ", ", layout.size(), " GPU slots, batch ", batch));
        }
      }
    }
  }
}

// `ps` reduction: GPU slots, and a CPU slot beside a GPU slot, through a
// parameter server on cpu:0 or cuda:0 (and across GPUs when there are
// several): the gradients go to the server (device to host, host to device,
// GPU to GPU or read in place), it sums, scales and updates, and every slot
// takes its weights. Batch 1 leaves a slot without rows, which must still
// take them.
TEST_F(DataParallelTrainerGpuTest, ParameterServerTrainsLikeOneCpuSlot) {
  struct PsLayout {
    std::string name;
    std::vector<DeviceInfo> slots;
    DeviceInfo ps;
  };
  std::vector<PsLayout> layouts = {
      {"2 GPU slots, ps cpu:0", {gpus_[0], gpus_[0]}, Cpu()},
      {"2 GPU slots, ps cuda:0", {gpus_[0], gpus_[0]}, gpus_[0]},
      {"CPU and GPU slots, ps cpu:0", {Cpu(), gpus_[0]}, Cpu()},
      {"CPU and GPU slots, ps cuda:0", {Cpu(), gpus_[0]}, gpus_[0]},
  };
  if (gpus_.size() > 1) layouts.push_back({"a slot per GPU, ps cuda:0", gpus_, gpus_[0]});
  for (const TestModel& model : Models()) {
    for (const OptimizerConfig& optimizer : testing::TrainingOptimizers()) {
      for (int64_t batch : {1, 7}) {
        const TrainedRun cpu = Train({Cpu()}, optimizer, model.onnx, model.classes, batch);
        ASSERT_EQ(cpu.losses.size(), 5u);
        for (const PsLayout& layout : layouts) {
          const TrainedRun ps =
              Train(layout.slots, optimizer, model.onnx, model.classes, batch, layout.ps);
          ExpectTrainsLike(ps, cpu, absl::StrCat(model.name, ", ", layout.name, ", batch ", batch));
        }
      }
    }
  }
}

// fp16 on two GPU slots, their roundings by the CUDA Cast kernels and the
// loss scale copied to each slot, the summed gradients checked for float16
// overflow on the host (a parameter server on cpu:0) or on the GPU
// (allreduce: replicad.AllFinite over the summed arena): the steps one CPU
// slot skips (from 2^20) are skipped alike, at the same scales, and the
// applied ones train like it within the tolerances. A server on the GPU
// refuses fp16.
class Float16GpuTest : public DataParallelTrainerGpuTest,
                       public ::testing::WithParamInterface<bool> {};

TEST_P(Float16GpuTest, SkipsAndTrainsLikeACpuSlot) {
  const bool parameter_server = GetParam();
  const OptimizerConfig sgd;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> cpu =
      MakeTrainer({Cpu()}, sgd, testing::ConvNetOnnx(7), std::nullopt, ComputePrecision::kFloat16);
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> gpu =
      MakeTrainer({gpus_[0], gpus_[0]}, sgd, testing::ConvNetOnnx(7),
                  parameter_server ? std::optional<DeviceInfo>(Cpu()) : std::nullopt,
                  ComputePrecision::kFloat16);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  int skipped = 0;
  for (int step = 0; step < 8; ++step) {
    const Tensor images = testing::RandomTensor({7, 2, 6, 6}, 100 + step);
    absl::StatusOr<DataParallelTrainer::StepResult> a =
        (*cpu)->Step({images}, testing::ClassLabels(7, 4, step));
    absl::StatusOr<DataParallelTrainer::StepResult> b =
        (*gpu)->Step({images}, testing::ClassLabels(7, 4, step));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->skipped.empty(), b->skipped.empty()) << "step " << step << ": " << b->skipped;
    EXPECT_EQ(a->loss_scale, b->loss_scale) << "step " << step;
    EXPECT_NEAR(b->loss, a->loss, kLossTolerance * std::fabs(a->loss)) << "step " << step;
    skipped += a->skipped.empty() ? 0 : 1;
  }
  EXPECT_GT(skipped, 0);
  const std::vector<Tensor> want = (*cpu)->SlotParameters(0).value();
  const std::vector<Tensor> got = (*gpu)->SlotParameters(0).value();
  ASSERT_EQ(got.size(), want.size());
  for (size_t w = 0; w < want.size(); ++w) {
    EXPECT_LE(testing::RelativeL2(got[w], want[w]), kWeightTolerance) << "tensor " << w;
  }
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> gpu_server =
      MakeTrainer({gpus_[0]}, sgd, testing::ConvNetOnnx(7), gpus_[0], ComputePrecision::kFloat16);
  EXPECT_EQ(gpu_server.status().code(), absl::StatusCode::kUnimplemented);
}

INSTANTIATE_TEST_SUITE_P(AllreduceAndCpuServer, Float16GpuTest, ::testing::Bool());

// Input prefetch on CUDA slots (input_prefetch.h): with the next batch
// posted before each step, every step after the first reads rows its slots
// uploaded on their upload streams while the step before computed, and the
// trainer trains bit for bit as one given no batch ahead (the same slots,
// the same kernels: only where the rows come from differs), under
// allreduce and through a server on cuda:0, with row counts that change
// (1 leaves a slot without rows, which uploads meanwhile).
TEST_F(DataParallelTrainerGpuTest, UpcomingBatchesAreUploadedAheadAndTrainTheSame) {
  const std::vector<std::optional<DeviceInfo>> servers = {std::nullopt, gpus_[0]};
  for (const std::optional<DeviceInfo>& ps : servers) {
    SCOPED_TRACE(ps ? "ps cuda:0" : "allreduce");
    const OptimizerConfig sgd;
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> ahead =
        MakeTrainer({gpus_[0], gpus_[0]}, sgd, BatchNormNetOnnx(), ps);
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> plain =
        MakeTrainer({gpus_[0], gpus_[0]}, sgd, BatchNormNetOnnx(), ps);
    ASSERT_TRUE(ahead.ok()) << ahead.status();
    ASSERT_TRUE(plain.ok()) << plain.status();
    auto upcoming = std::make_shared<UpcomingBatches>();
    (*ahead)->ExpectBatchesFrom(upcoming);
    const std::vector<int64_t> rows = {64, 64, 7, 1, 64, 33};
    std::vector<std::shared_ptr<UpcomingBatch>> batches;
    for (size_t k = 0; k < rows.size(); ++k) {
      auto batch = std::make_shared<UpcomingBatch>();
      batch->inputs = {testing::RandomTensor({rows[k], 2, 6, 6}, 500 + k)};
      batch->targets = testing::ClassLabels(rows[k], 3, k);
      batches.push_back(std::move(batch));
    }
    for (size_t k = 0; k < batches.size(); ++k) {
      upcoming->Expect(k + 1 < batches.size() ? batches[k + 1] : nullptr);
      absl::StatusOr<DataParallelTrainer::StepResult> a =
          (*ahead)->Step(batches[k]->inputs, batches[k]->targets);
      absl::StatusOr<DataParallelTrainer::StepResult> b =
          (*plain)->Step(batches[k]->inputs, batches[k]->targets);
      ASSERT_TRUE(a.ok()) << "step " << k << ": " << a.status();
      ASSERT_TRUE(b.ok()) << "step " << k << ": " << b.status();
      EXPECT_EQ(a->loss, b->loss) << "step " << k;
      for (const DataParallelTrainer::SliceResult& slice : a->slices) {
        EXPECT_EQ(slice.input_prefetched, k > 0) << "step " << k << ", slot " << slice.slice.slot;
      }
    }
    for (int s = 0; s < 2; ++s) {
      const std::vector<Tensor> got = (*ahead)->SlotParameters(s).value();
      const std::vector<Tensor> want = (*plain)->SlotParameters(s).value();
      ASSERT_EQ(got.size(), want.size());
      for (size_t w = 0; w < want.size(); ++w) {
        EXPECT_EQ(std::memcmp(got[w].raw_data(), want[w].raw_data(), want[w].byte_size()), 0)
            << "slot " << s << ", tensor " << w;
      }
    }
  }
}

// More slots than rows: the slot without rows still takes part in the
// reduction (adding zeros), and the step is the one-slot step.
TEST_F(DataParallelTrainerGpuTest, SlotWithoutRowsTakesPart) {
  OptimizerConfig sgd;
  const TrainedRun cpu = Train({Cpu()}, sgd, testing::ConvNetOnnx(7), 4, 1);
  const TrainedRun gpu = Train({gpus_[0], gpus_[0]}, sgd, testing::ConvNetOnnx(7), 4, 1);
  ASSERT_EQ(gpu.losses.size(), 5u);
  for (size_t w = 0; w < cpu.weights.size(); ++w) {
    EXPECT_LE(testing::RelativeL2(gpu.weights[w], cpu.weights[w]), kWeightTolerance);
  }
}

// A label out of range fails on the GPU as on the CPU, naming it, and
// changes nothing (with allreduce, or a parameter server on cpu:0 or
// cuda:0); the trainer then still trains.
TEST_F(DataParallelTrainerGpuTest, BadLabelsChangeNothing) {
  const std::vector<std::optional<DeviceInfo>> servers = {std::nullopt, Cpu(), gpus_[0]};
  for (const std::optional<DeviceInfo>& ps : servers) {
    SCOPED_TRACE(ps ? "ps " + DeviceIdToString(ps->id) : "allreduce");
    OptimizerConfig sgd;
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
        MakeTrainer({gpus_[0], gpus_[0]}, sgd, testing::ConvNetOnnx(7), ps);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    testing::ExpectBadLabelsChangeNothing(**trainer, 1);
  }
}

// Without a parameter server, that is: the error says to use one.
TEST_F(DataParallelTrainerGpuTest, MixedSlotsWithAllreduceAreUnimplemented) {
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> mixed =
      MakeTrainer({Cpu(), gpus_[0]}, OptimizerConfig{}, testing::ConvNetOnnx(7));
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(mixed.status().message()),
              AllOf(HasSubstr("all CPU or all GPU"), HasSubstr("reduction 'ps'")));
}

}  // namespace
}  // namespace replicad
