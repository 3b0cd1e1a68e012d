// PipelineTrainer (a training step through a pipeline, model parallelism): a
// convolution net placed over two contexts (the convolution on dev0, the
// classifier on dev1) trains 5 steps with SGD (momentum, Nesterov, weight
// decay) and Adam like one DataParallelTrainer slot: in one micro-batch bit
// for bit (the same kernels on the same shapes, the same update), in four
// within 1e-6 relative (losses, and every parameter's L2: the micro-batches'
// sums add in another order), and so with two pipelines of two micro-batches
// each (data parallelism over pipelines). The backward pass of the convolution runs on
// dev0 again, after the classifier's on dev1 (three parts).

#include "core/serve/pipeline_trainer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/train/data_parallel_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

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

// `model`'s nodes named c* on dev0, logits* on dev1, two CPU slots per
// pipeline, `copies` pipelines.
absl::StatusOr<std::unique_ptr<PipelineTrainer>> PlacedConvNet(std::shared_ptr<const Model> model,
                                                               const TrainerOptions& options,
                                                               int micro_batches, int copies = 1) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  absl::StatusOr<std::vector<std::string>> context_of =
      NodeContexts(model->graph(), *ParsePlacement("c->dev0; logits->dev1", "p"), {"dev0", "dev1"});
  if (!context_of.ok()) return context_of.status();
  const std::vector<SlotAssignment> contexts = {SlotAssignment{"dev0", cpu.id, 1},
                                                SlotAssignment{"dev1", cpu.id, 1}};
  return PipelineTrainer::Create(
      std::move(model), *context_of, std::vector<std::vector<SlotAssignment>>(copies, contexts),
      [cpu](const SlotAssignment&) -> absl::StatusOr<std::unique_ptr<Device>> {
        return CreateCpuDevice(cpu, CpuSlotOptions{1});
      },
      options, micro_batches);
}

absl::StatusOr<std::unique_ptr<PipelineTrainer>> Placed(const OptimizerConfig& optimizer,
                                                        int micro_batches, int copies) {
  return PlacedConvNet(testing::LoadForTraining(testing::ConvNetOnnx(7)), Options(optimizer),
                       micro_batches, copies);
}

Trained Pipelined(const OptimizerConfig& optimizer, int micro_batches, int copies = 1) {
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> trainer =
      Placed(optimizer, micro_batches, copies);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  Trained run;
  if (!trainer.ok()) return run;
  const PipelineReplica& pipeline = (*trainer)->pipeline();
  EXPECT_GE(pipeline.part_count(), 3u);
  EXPECT_EQ(pipeline.part_context(0), "dev0");
  EXPECT_EQ(pipeline.part_context(pipeline.part_count() - 1), "dev0");  // The conv's gradient.
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<TrainerStepResult> result =
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
    // {micro-batches, pipelines}: two pipelines take 4 rows each.
    for (auto [micro_batches, copies] : {std::pair{1, 1}, std::pair{4, 1}, std::pair{2, 2}}) {
      SCOPED_TRACE(absl::StrCat(micro_batches, " micro-batch(es), ", copies,
                                " pipeline(s), optimizer ", static_cast<int>(optimizer.kind)));
      const Trained placed = Pipelined(optimizer, micro_batches, copies);
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

// A step the trainer cannot apply changes nothing: labels out of range are
// refused naming them; a loss that overflows is refused (kRefuse) or
// answered as skipped (kSkip), the weights and the step count as they were.
// A good step reports its accuracy.
TEST(PipelineTrainerTest, AStepItCannotApplyChangesNothing) {
  for (auto policy :
       {TrainerOptions::NonFiniteSteps::kRefuse, TrainerOptions::NonFiniteSteps::kSkip}) {
    TrainerOptions options = Options(testing::TrainingOptimizers()[0]);
    options.non_finite_steps = policy;
    absl::StatusOr<std::unique_ptr<PipelineTrainer>> trainer =
        PlacedConvNet(testing::LoadForTraining(testing::ConvNetOnnx(7)), options, 2);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    const std::map<std::string, Tensor> before = (*trainer)->Parameters();
    std::map<std::string, std::vector<char>> bytes;
    for (const auto& [name, t] : before) {
      const char* raw = static_cast<const char*>(t.raw_data());
      bytes[name].assign(raw, raw + t.byte_size());
    }
    const Tensor images = testing::RandomTensor({4, 2, 6, 6}, 1);
    Tensor labels = testing::ClassLabels(4, 4, 0);
    labels.data<int64_t>()[3] = 9;
    absl::StatusOr<TrainerStepResult> result = (*trainer)->Step({images}, labels);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr("must be a class in [0, 4), received 9"));
    EXPECT_EQ((*trainer)->Validate({images}, testing::ClassLabels(3, 4, 0)).code(),
              absl::StatusCode::kInvalidArgument);

    Tensor huge = testing::RandomTensor({4, 2, 6, 6}, 2);
    for (int64_t e = 0; e < huge.num_elements(); ++e) huge.data<float>()[e] *= 3e37f;
    result = (*trainer)->Step({huge}, testing::ClassLabels(4, 4, 0));
    if (policy == TrainerOptions::NonFiniteSteps::kRefuse) {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(result.status().message()),
                  HasSubstr("the step was not applied and the weights are unchanged"));
    } else {
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_THAT(result->skipped, HasSubstr("not finite"));
      EXPECT_EQ(result->step, 0);
    }
    EXPECT_EQ((*trainer)->step(), 0);
    for (const auto& [name, t] : (*trainer)->Parameters()) {
      EXPECT_EQ(std::memcmp(t.raw_data(), bytes[name].data(), t.byte_size()), 0) << name;
    }
    result = (*trainer)->Step({images}, testing::ClassLabels(4, 4, 0));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->step, 1);
    EXPECT_EQ(result->samples, 4);
    ASSERT_TRUE(result->accuracy.has_value());
    EXPECT_GE(*result->accuracy, 0.0);
    EXPECT_LE(*result->accuracy, 1.0);
  }
}

// What a checkpoint holds (CurrentModel's weights, OptimizerState at the
// step) resumes a new pipeline trainer where the first stopped: Adam's next
// step is the same, bit for bit.
TEST(PipelineTrainerTest, ResumesFromItsModelAndOptimizerState) {
  const TrainerOptions options = Options(testing::TrainingOptimizers()[1]);
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> first =
      PlacedConvNet(testing::LoadForTraining(testing::ConvNetOnnx(7)), options, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE((*first)
                    ->Step({testing::RandomTensor({kBatch, 2, 6, 6}, 10 + step)},
                           testing::ClassLabels(kBatch, 4, step))
                    .ok());
  }
  absl::StatusOr<std::shared_ptr<const Model>> model = (*first)->CurrentModel();
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state = (*first)->OptimizerState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->empty());
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> second = PlacedConvNet(*model, options, 2);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)->Resume(2, *state).ok());
  EXPECT_EQ((*second)->step(), 2);
  const Tensor images = testing::RandomTensor({kBatch, 2, 6, 6}, 12);
  absl::StatusOr<TrainerStepResult> a =
      (*first)->Step({images}, testing::ClassLabels(kBatch, 4, 2));
  absl::StatusOr<TrainerStepResult> b =
      (*second)->Step({images}, testing::ClassLabels(kBatch, 4, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->loss, b->loss);
  EXPECT_EQ(b->step, 3);
  const std::map<std::string, Tensor> want = (*first)->Parameters();
  for (const auto& [name, t] : (*second)->Parameters()) {
    EXPECT_EQ(std::memcmp(t.raw_data(), want.at(name).raw_data(), t.byte_size()), 0) << name;
  }
}

// x -> MatMul 'c' -> Dropout 'd' (training form) -> MatMul 'logits'.
std::string DropoutMlpOnnx() {
  OnnxModelBuilder b("dropout", 13);
  b.AddInitializer("w", testing::RandomTensor({3, 8}, 1));
  b.AddInitializer("w2", testing::RandomTensor({8, 2}, 2));
  b.AddNode("MatMul", {"x", "w"}, {"c"});
  testing::AddTrainingDropout(b, "c", "d", 0.5f);
  b.AddNode("MatMul", {"d", "w2"}, {"logits"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 2});
  return b.Serialize();
}

// Dropout's masks are keyed by the step, the seed and the row's index in
// the batch: through a pipeline of 3 micro-batches, and over two pipelines,
// the steps are one slot's (within 1e-6 relative), and another seed's
// differ (the masks are drawn, not skipped).
TEST(PipelineTrainerTest, DropoutMasksFollowTheBatchsRows) {
  TrainerOptions options = Options(testing::TrainingOptimizers()[0]);
  options.seed = 11;
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<TrainerSlot> slots;
  slots.push_back({SlotAssignment{"r0", cpu.id, 1.0}, CreateCpuDevice(cpu, {1})});
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> one = DataParallelTrainer::Create(
      testing::LoadForTraining(DropoutMlpOnnx()), std::move(slots), options, {});
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> piped =
      PlacedConvNet(testing::LoadForTraining(DropoutMlpOnnx()), options, 3);
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> two =
      PlacedConvNet(testing::LoadForTraining(DropoutMlpOnnx()), options, 2, 2);
  options.seed = 12;
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> other =
      PlacedConvNet(testing::LoadForTraining(DropoutMlpOnnx()), options, 3);
  ASSERT_TRUE(piped.ok() && two.ok() && other.ok()) << piped.status();
  bool differs = false;
  for (int step = 0; step < 3; ++step) {
    const Tensor x = testing::RandomTensor({9, 3}, 20 + step);
    const Tensor labels = testing::ClassLabels(9, 2, step);
    absl::StatusOr<TrainerStepResult> want = (*one)->Step({x}, labels);
    ASSERT_TRUE(want.ok()) << want.status();
    for (auto* trainer : {piped->get(), two->get()}) {
      absl::StatusOr<TrainerStepResult> got = trainer->Step({x}, labels);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_NEAR(got->loss, want->loss, 1e-6 * std::fabs(want->loss)) << "step " << step;
    }
    absl::StatusOr<TrainerStepResult> reseeded = (*other)->Step({x}, labels);
    ASSERT_TRUE(reseeded.ok()) << reseeded.status();
    differs = differs || std::fabs(reseeded->loss - want->loss) > 1e-4 * std::fabs(want->loss);
  }
  EXPECT_TRUE(differs) << "another seed drew the same masks";
}

// bf16 marks the training graph's products as data-parallel training
// does: in one micro-batch (the same kernels on the same rows) a step is one
// bf16 slot's, bit for bit. fp16, whose loss scaling the pipeline does not
// carry, is refused naming the precision.
TEST(PipelineTrainerTest, TrainsInBFloat16AndRefusesFloat16) {
  TrainerOptions options = Options(testing::TrainingOptimizers()[0]);
  options.precision = ComputePrecision::kBFloat16;
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<TrainerSlot> slots;
  slots.push_back({SlotAssignment{"r0", cpu.id, 1.0}, CreateCpuDevice(cpu, {1})});
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> one = DataParallelTrainer::Create(
      testing::LoadForTraining(testing::ConvNetOnnx(7)), std::move(slots), options, {});
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> bf16 =
      PlacedConvNet(testing::LoadForTraining(testing::ConvNetOnnx(7)), options, 1);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  for (int step = 0; step < 3; ++step) {
    const Tensor images = testing::RandomTensor({kBatch, 2, 6, 6}, 30 + step);
    absl::StatusOr<TrainerStepResult> want =
        (*one)->Step({images}, testing::ClassLabels(kBatch, 4, step));
    absl::StatusOr<TrainerStepResult> got =
        (*bf16)->Step({images}, testing::ClassLabels(kBatch, 4, step));
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_EQ(got->loss, want->loss) << "step " << step;
  }
  options.precision = ComputePrecision::kFloat16;
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> fp16 =
      PlacedConvNet(testing::LoadForTraining(testing::ConvNetOnnx(7)), options, 2);
  EXPECT_EQ(fp16.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(fp16.status().message()), HasSubstr("precision: "));
}

// x -> MatMul(w) 'c' on dev0 -> MatMul(w2) 'logits' on dev1: the gradient
// of w on dev0 reads x transposed, a value whose rows are in dim 1, handed
// over from the forward part; it plans and trains as one slot does, at 1
// and 5 rows.
TEST(PipelineTrainerTest, HandsOverValuesWhoseRowsAreNotInDimZero) {
  OnnxModelBuilder b("mlp", 13);
  b.AddInitializer("w", testing::RandomTensor({3, 4}, 1));
  b.AddInitializer("w2", testing::RandomTensor({4, 2}, 2));
  b.AddNode("MatMul", {"x", "w"}, {"c"});
  b.AddNode("MatMul", {"c", "w2"}, {"logits"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 2});
  const std::string onnx = b.Serialize();
  const TrainerOptions options = Options(testing::TrainingOptimizers()[1]);
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<TrainerSlot> slots;
  slots.push_back({SlotAssignment{"r0", cpu.id, 1.0}, CreateCpuDevice(cpu, {1})});
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> one =
      DataParallelTrainer::Create(testing::LoadForTraining(onnx), std::move(slots), options, {});
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> placed =
      PlacedConvNet(testing::LoadForTraining(onnx), options, 2);
  ASSERT_TRUE(placed.ok()) << placed.status();
  for (int64_t rows : {1, 5, 5}) {
    const Tensor x = testing::RandomTensor({rows, 3}, 3 + rows);
    absl::StatusOr<TrainerStepResult> want = (*one)->Step({x}, testing::ClassLabels(rows, 2, 0));
    absl::StatusOr<TrainerStepResult> got = (*placed)->Step({x}, testing::ClassLabels(rows, 2, 0));
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(got->loss, want->loss, 1e-6 * std::fabs(want->loss)) << rows << " rows";
  }
}

}  // namespace
}  // namespace replicad
