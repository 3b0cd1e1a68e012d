// Training with TrainerOptions::precision bf16 and fp16 on CPU slots: the
// forward pass's convolution (8 -> 8 channels, 3 x 3: the 64 products an
// output and an input that a bf16 convolution needs) and classifier read
// bfloat16 (or float16) inputs and weights, the sums, gradients, optimizer
// and master weights stay float32.
//
// Checked for bf16: 1, 2 and 3 slots train alike (losses and weights after 5
// steps within 1e-5 relative of one slot's, batches 7 and 64; the bound of
// float32's split-invariance test, since the rounding to bfloat16 is per
// element and the sums are float32 in both); the bf16 run's losses differ
// from float32's (by more than 1e-7 relative: the products did read
// bfloat16) and stay within 2e-2 of them (bfloat16's 8 bits of mantissa on
// inputs and weights; a training run drifts a little further each step); the
// weights stay float32 values that bfloat16 cannot hold (master weights).
// Without bfloat16 dot products (AVX512_BF16 or AMX) the slots compute
// float32: the bf16 run then equals float32's bit for bit.
//
// Checked for fp16 (float16_products.h, loss_scaler.h): the same split
// invariance within 1e-5 (the roundings are per element, the weight
// gradients float32 sums); losses differ from float32's by more than 1e-7
// and less than 2e-3 relative (float16's 11 bits); and loss scaling as
// GradScaler does it: from a scale of 2^24 the first steps overflow float16
// and are skipped (answered OK with `skipped` naming the overflow, the
// weights and the step count unchanged, even with non_finite_steps refuse),
// each halving the scale, until one fits; two finite steps in a row
// (growth_interval 2) then double it; every step's loss_scale follows those
// rules exactly over 40 steps.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/tensor/half_float.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/loss_scaler.h"
#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr int64_t kChannels = 8, kSide = 6, kClasses = 4;

// x [N, 8, 6, 6] -> Conv(8, 3x3, pad 1, bias) -> Relu -> Flatten -> Gemm(transB, bias) -> logits.
std::string NetworkOnnx() {
  OnnxModelBuilder b("bf16_train", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, kChannels, kSide, kSide});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, kClasses});
  Tensor w1 = testing::RandomTensor({kChannels, kChannels, 3, 3}, 1);
  Tensor w2 = testing::RandomTensor({kClasses, kChannels * kSide * kSide}, 2);
  for (Tensor* w : {&w1, &w2}) {
    for (int64_t i = 0; i < w->num_elements(); ++i) w->data<float>()[i] *= 0.1f;
  }
  b.AddInitializer("w1", w1);
  b.AddInitializer("b1", testing::RandomTensor({kChannels}, 3));
  b.AddInitializer("w2", w2);
  b.AddInitializer("b2", testing::RandomTensor({kClasses}, 4));
  onnx::NodeProto* conv = b.AddNode("Conv", {"x", "w1", "b1"}, {"c"});
  OnnxModelBuilder::SetInts(conv, "pads", {1, 1, 1, 1});
  b.AddNode("Relu", {"c"}, {"r"});
  b.AddNode("Flatten", {"r"}, {"f"});
  onnx::NodeProto* gemm = b.AddNode("Gemm", {"f", "w2", "b2"}, {"logits"});
  OnnxModelBuilder::SetInt(gemm, "transB", 1);
  return b.Serialize();
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<Tensor> weights;
};

std::unique_ptr<DataParallelTrainer> MakeTrainer(int slots, ComputePrecision precision,
                                                 LossScaling scaling) {
  std::vector<TrainerSlot> trainer_slots;
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  for (int s = 0; s < slots; ++s) {
    trainer_slots.push_back(
        {SlotAssignment{"r" + std::to_string(s), cpu.id, 1.0}, CreateCpuDevice(cpu, {1})});
  }
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits", DType::kInt64};
  options.optimizer.learning_rate = 0.1f;
  options.precision = precision;
  options.loss_scaling = scaling;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
      DataParallelTrainer::Create(testing::LoadForTraining(NetworkOnnx()), std::move(trainer_slots),
                                  options, TrainerReduction{});
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

absl::StatusOr<DataParallelTrainer::StepResult> StepOn(DataParallelTrainer& trainer, int64_t batch,
                                                       int step) {
  return trainer.Step({testing::RandomTensor({batch, kChannels, kSide, kSide}, 100 + step)},
                      testing::ClassLabels(batch, kClasses, step));
}

// fp16 starts where no step of these overflows.
constexpr LossScaling kGentleScale{256.0f, 2000};

TrainedRun Train(int slots, int64_t batch, ComputePrecision precision,
                 LossScaling scaling = kGentleScale) {
  TrainedRun run;
  std::unique_ptr<DataParallelTrainer> trainer = MakeTrainer(slots, precision, scaling);
  if (trainer == nullptr) return run;
  for (int step = 0; step < 5; ++step) {
    absl::StatusOr<DataParallelTrainer::StepResult> result = StepOn(*trainer, batch, step);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return run;
    EXPECT_EQ(result->skipped, "") << "step " << step;
    run.losses.push_back(result->loss);
  }
  run.weights = trainer->SlotParameters(0).value();
  return run;
}

// `reduced`'s losses within `bound` relative of `fp32`'s at every step, and
// further than 1e-7 at one at least (it did round).
void ExpectLossesMovedWithin(const TrainedRun& reduced, const TrainedRun& fp32, double bound) {
  double largest = 0;
  for (size_t step = 0; step < fp32.losses.size(); ++step) {
    const double relative = std::fabs(reduced.losses[step] - fp32.losses[step]) / fp32.losses[step];
    EXPECT_LE(relative, bound) << "step " << step;
    largest = std::max(largest, relative);
  }
  EXPECT_GT(largest, 1e-7) << "the reduced-precision run computed what float32 does";
}

bool HasBFloat16Products() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

class SplitInvarianceTest : public ::testing::TestWithParam<ComputePrecision> {};

TEST_P(SplitInvarianceTest, TrainsAlikeOnAnySplit) {
  for (int64_t batch : {7, 64}) {
    const TrainedRun one = Train(1, batch, GetParam());
    ASSERT_EQ(one.losses.size(), 5u);
    EXPECT_NE(one.losses.front(), one.losses.back()) << "training moved nothing";
    for (int slots : {2, 3}) {
      const TrainedRun many = Train(slots, batch, GetParam());
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

INSTANTIATE_TEST_SUITE_P(Precisions, SplitInvarianceTest,
                         ::testing::Values(ComputePrecision::kBFloat16, ComputePrecision::kFloat16),
                         [](const ::testing::TestParamInfo<ComputePrecision>& info) {
                           return std::string(ComputePrecisionName(info.param));
                         });

TEST(MixedPrecisionTrainingTest, BFloat16MovesTheLossByItsRoundingAndKeepsFloatWeights) {
  const TrainedRun fp32 = Train(2, 64, ComputePrecision::kFloat32);
  const TrainedRun bf16 = Train(2, 64, ComputePrecision::kBFloat16);
  ASSERT_EQ(fp32.losses.size(), 5u);
  ASSERT_EQ(bf16.losses.size(), 5u);
  if (!HasBFloat16Products()) {
    for (int step = 0; step < 5; ++step) EXPECT_EQ(bf16.losses[step], fp32.losses[step]);
    GTEST_SKIP() << "no bfloat16 dot products on this CPU: both computed float32";
  }
  ExpectLossesMovedWithin(bf16, fp32, 2e-2);
  // Master weights: float32 values, not bfloat16 ones.
  int64_t not_bfloat16 = 0, count = 0;
  for (const Tensor& w : bf16.weights) {
    for (int64_t i = 0; i < w.num_elements(); ++i, ++count) {
      const float v = w.data<float>()[i];
      not_bfloat16 += BFloat16ToFloat(FloatToBFloat16(v)) != v;
    }
  }
  EXPECT_GT(not_bfloat16, count / 2);
}

TEST(MixedPrecisionTrainingTest, Float16MovesTheLossByItsRounding) {
  const TrainedRun fp32 = Train(2, 64, ComputePrecision::kFloat32);
  const TrainedRun fp16 = Train(2, 64, ComputePrecision::kFloat16);
  ASSERT_EQ(fp32.losses.size(), 5u);
  ASSERT_EQ(fp16.losses.size(), 5u);
  ExpectLossesMovedWithin(fp16, fp32, 2e-3);
}

TEST(MixedPrecisionTrainingTest, Float16OverflowIsSkippedHalvesTheScaleThenItGrowsBack) {
  constexpr int64_t kGrowthInterval = 2;
  std::unique_ptr<DataParallelTrainer> trainer = MakeTrainer(
      2, ComputePrecision::kFloat16, LossScaling{std::ldexp(1.0f, 24), kGrowthInterval});
  ASSERT_NE(trainer, nullptr);
  float expected_scale = std::ldexp(1.0f, 24);
  int64_t finite_in_a_row = 0, applied = 0, skipped = 0, growths = 0;
  for (int step = 0; step < 40; ++step) {
    const std::vector<Tensor> before = trainer->SlotParameters(0).value();
    absl::StatusOr<DataParallelTrainer::StepResult> result = StepOn(*trainer, 16, step);
    ASSERT_TRUE(result.ok()) << "step " << step << ": " << result.status();
    EXPECT_EQ(result->loss_scale, expected_scale) << "step " << step;
    if (!result->skipped.empty()) {
      ++skipped;
      EXPECT_NE(result->skipped.find("float16 overflowed"), std::string::npos) << result->skipped;
      EXPECT_EQ(result->step, applied) << "a skipped step is not counted";
      const std::vector<Tensor> after = trainer->SlotParameters(0).value();
      for (size_t p = 0; p < before.size(); ++p) {
        EXPECT_EQ(testing::RelativeL2(after[p], before[p]), 0.0) << "parameter " << p;
      }
      expected_scale /= 2;
      finite_in_a_row = 0;
      continue;
    }
    ++applied;
    EXPECT_EQ(result->step, applied);
    if (++finite_in_a_row == kGrowthInterval) {
      expected_scale *= 2;
      finite_in_a_row = 0;
      ++growths;
    }
  }
  std::cout << "fp16 from 2^24: " << skipped << " steps skipped, " << applied << " applied, "
            << growths << " growths; scale after: " << expected_scale << std::endl;
  EXPECT_GE(skipped, 2) << "2^24 should overflow float16 more than once";
  EXPECT_GE(applied, 10);
  EXPECT_GE(growths, 2) << "the scale never grew back";
}

// The loss scale rides in the optimizer state a checkpoint keeps: a trainer
// resumed from it computes its next step with the scale (and the count of
// finite steps towards the next growth) where the first left off, not with
// initial_loss_scale; a run without fp16 drops those entries.
TEST(MixedPrecisionTrainingTest, Float16LossScaleResumesFromTheOptimizerState) {
  const LossScaling scaling{std::ldexp(1.0f, 24), 3};
  std::unique_ptr<DataParallelTrainer> first = MakeTrainer(2, ComputePrecision::kFloat16, scaling);
  ASSERT_NE(first, nullptr);
  float next_scale = 0;
  int64_t applied = 0;
  for (int step = 0; step < 12; ++step) {
    absl::StatusOr<DataParallelTrainer::StepResult> result = StepOn(*first, 16, step);
    ASSERT_TRUE(result.ok()) << result.status();
    applied = result->step;
  }
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state = first->OptimizerState();
  ASSERT_TRUE(state.ok()) << state.status();
  const Tensor* saved_scale = nullptr;
  for (const auto& [name, tensor] : *state) {
    if (name == LossScaler::kScaleState) saved_scale = &tensor;
  }
  ASSERT_NE(saved_scale, nullptr);
  next_scale = saved_scale->data<float>()[0];
  EXPECT_LT(next_scale, scaling.initial_scale) << "2^24 overflowed and the scale came down";
  // The first trainer's own next step, and the resumed trainer's first.
  absl::StatusOr<DataParallelTrainer::StepResult> continued = StepOn(*first, 16, 12);
  ASSERT_TRUE(continued.ok());
  EXPECT_EQ(continued->loss_scale, next_scale);

  std::unique_ptr<DataParallelTrainer> resumed =
      MakeTrainer(2, ComputePrecision::kFloat16, scaling);
  ASSERT_NE(resumed, nullptr);
  ASSERT_TRUE(resumed->Resume(applied, *state).ok());
  absl::StatusOr<DataParallelTrainer::StepResult> after = StepOn(*resumed, 16, 12);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->loss_scale, next_scale);

  std::unique_ptr<DataParallelTrainer> float32 = MakeTrainer(1, ComputePrecision::kFloat32, {});
  ASSERT_NE(float32, nullptr);
  EXPECT_TRUE(float32->Resume(applied, *state).ok()) << "fp32 ignores the loss scale";
  EXPECT_EQ(float32->OptimizerState()->size(), state->size() - 2);

  // A corrupt scale is refused, naming it, and changes nothing.
  std::vector<std::pair<std::string, Tensor>> corrupt = *state;
  for (auto& [name, tensor] : corrupt) {
    if (name == LossScaler::kScaleState) {
      tensor = Tensor::Host(DType::kFloat32, {1});
      tensor.data<float>()[0] = -1.0f;
    }
  }
  const absl::Status refused = resumed->Resume(applied, corrupt);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("replicad.loss_scale"), std::string::npos) << refused;
}

}  // namespace
}  // namespace replicad
