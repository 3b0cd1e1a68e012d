// Data-parallel training is exact: N CPU slots train like one on the whole
// batch, whatever the split, and the slots' weights stay identical.
//
// Covered: 1, 2 and 3 slots train alike (SGD with Nesterov and weight decay, Adam and RMSprop) for
// batches 7, 2 and 64; a PyTorch-exported CNN with BatchNormalization and Dropout, 5 steps on one
// slot against PyTorch doing the same steps (losses within 1e-4, weights and running statistics
// within 1e-4 relative), and over 1, 2 and 3 slots with dropout 0.3 (within 1e-5; slots
// bit-identical); the `ps` reduction with CPU slots and a CPU server gives the same bits as
// allreduce; bad targets and non-finite steps change nothing (weights, optimizer state, running
// statistics and the step count stay bit-identical), over allreduce and `ps`.

#include "core/train/data_parallel_trainer.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/train/training_batch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/torch_reference.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/proto_tensors.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<DataParallelTrainer> MakeTrainer(
    int slots, const OptimizerConfig& optimizer, std::shared_ptr<const Model> model = nullptr,
    bool parameter_server = false, DType target_dtype = DType::kInt64,
    TrainerOptions::NonFiniteSteps non_finite = TrainerOptions::NonFiniteSteps::kRefuse) {
  if (model == nullptr) model = testing::LoadForTraining(testing::ConvNetOnnx(7));
  std::vector<TrainerSlot> trainer_slots;
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  for (int s = 0; s < slots; ++s) {
    trainer_slots.push_back(
        {SlotAssignment{"r" + std::to_string(s), cpu.id, 1.0}, CreateCpuDevice(cpu, {1})});
  }
  TrainerOptions options;
  options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy, "logits", target_dtype};
  options.optimizer = optimizer;
  options.seed = 5;
  options.non_finite_steps = non_finite;
  std::optional<ParameterServerDevice> server;
  if (parameter_server) server = ParameterServerDevice{cpu.id, CreateCpuDevice(cpu, {1})};
  TrainerReduction reduction;
  reduction.parameter_server = std::move(server);
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer = DataParallelTrainer::Create(
      std::move(model), std::move(trainer_slots), options, std::move(reduction));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return *std::move(trainer);
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<Tensor> weights;
};

TrainedRun Train(int slots, int64_t batch, const OptimizerConfig& optimizer) {
  std::unique_ptr<DataParallelTrainer> trainer = MakeTrainer(slots, optimizer);
  TrainedRun run;
  for (int step = 0; step < 5; ++step) {
    absl::StatusOr<DataParallelTrainer::StepResult> result =
        trainer->Step({testing::RandomTensor({batch, 2, 6, 6}, 100 + step)},
                      testing::ClassLabels(batch, 4, step));
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return run;
    EXPECT_EQ(result->step, step + 1);
    EXPECT_EQ(result->samples, batch);
    EXPECT_EQ(result->slices.size(), static_cast<size_t>(std::min<int64_t>(batch, slots)));
    for (const DataParallelTrainer::SliceResult& slice : result->slices) {
      EXPECT_GT(slice.forward_seconds, 0.0);
      EXPECT_LT(slice.forward_seconds, slice.compute_seconds);
    }
    EXPECT_TRUE(result->accuracy.has_value()) << "classification";
    run.losses.push_back(result->loss);
  }
  run.weights = trainer->SlotParameters(0).value();
  // Every slot holds the same weights, bit for bit.
  for (int s = 1; s < slots; ++s) {
    std::vector<Tensor> other = trainer->SlotParameters(s).value();
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
  for (const OptimizerConfig& optimizer : testing::TrainingOptimizers()) {
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

// `ps` reduction: the server updates, the slots take its weights. The same
// arithmetic as allreduce, so the same bits; one optimizer state.
TEST(DataParallelTrainerTest, ParameterServerTrainsLikeAllreduce) {
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::kAdam;
  adam.learning_rate = 0.01f;
  std::unique_ptr<DataParallelTrainer> allreduce = MakeTrainer(3, adam);
  std::unique_ptr<DataParallelTrainer> ps = MakeTrainer(3, adam, nullptr, true);
  for (int step = 0; step < 4; ++step) {
    const Tensor images = testing::RandomTensor({7, 2, 6, 6}, 60 + step);
    absl::StatusOr<DataParallelTrainer::StepResult> a =
        allreduce->Step({images}, testing::ClassLabels(7, 4, step));
    absl::StatusOr<DataParallelTrainer::StepResult> b =
        ps->Step({images}, testing::ClassLabels(7, 4, step));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->loss, b->loss) << "step " << step;
  }
  for (int s = 0; s < 3; ++s) {
    const std::vector<Tensor> x = allreduce->SlotParameters(s).value(),
                              y = ps->SlotParameters(s).value();
    for (size_t p = 0; p < x.size(); ++p) {
      EXPECT_EQ(std::memcmp(x[p].raw_data(), y[p].raw_data(), x[p].byte_size()), 0)
          << "slot " << s << " parameter " << p;
    }
  }
  EXPECT_EQ(ps->OptimizerState()->size(), allreduce->OptimizerState()->size());
}

TEST(CheckClassLabelsTest, NamesTheFirstLabelOutsideTheClassesByItsRowInTheBatch) {
  Tensor labels = testing::ClassLabels(5, 10, 0);
  EXPECT_TRUE(CheckClassLabels(labels, 10, 0).ok());
  labels.data<int64_t>()[2] = -1;
  labels.data<int64_t>()[4] = 10;
  const absl::Status status = CheckClassLabels(labels, 10, 64);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "targets[66] must be a class in [0, 10), received -1");
  labels.data<int64_t>()[2] = 9;
  EXPECT_EQ(CheckClassLabels(labels, 10, 0).message(),
            "targets[4] must be a class in [0, 10), received 10");
}

TEST(DataParallelTrainerTest, BadTargetsChangeNothing) {
  OptimizerConfig sgd;
  std::unique_ptr<DataParallelTrainer> trainer = MakeTrainer(2, sgd);
  const std::vector<Tensor> before = trainer->SlotParameters(0).value();
  const Tensor images = testing::RandomTensor({4, 2, 6, 6}, 1);

  Tensor out_of_range = testing::ClassLabels(4, 4, 0);
  out_of_range.data<int64_t>()[3] = 9;
  absl::StatusOr<DataParallelTrainer::StepResult> result = trainer->Step({images}, out_of_range);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  // Checked on the host before any slot runs, named by its row in the batch
  // (slot 1's second row).
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("targets[3] must be a class in [0, 4), received 9"));

  result = trainer->Step({images}, testing::ClassLabels(3, 4, 0));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("targets: dim 0 must be the batch size 4 of the inputs, received [3]"));

  result = trainer->Step({images}, testing::RandomTensor({4}, 2));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("targets: softmax cross-entropy takes int64 [N] class labels or float32 "
                        "[N, C] probabilities, received float32[4]"));

  // Probabilities are a valid form, but this trainer was made for labels.
  result = trainer->Step({images}, testing::RandomTensor({4, 4}, 2));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("targets: dtype must be int64, received float32"));

  EXPECT_EQ(trainer->step(), 0);
  const std::vector<Tensor> after = trainer->SlotParameters(0).value();
  for (size_t p = 0; p < before.size(); ++p) {
    EXPECT_EQ(std::memcmp(before[p].raw_data(), after[p].raw_data(), before[p].byte_size()), 0);
  }
  // And the trainer still trains.
  EXPECT_TRUE(trainer->Step({images}, testing::ClassLabels(4, 4, 0)).ok());
  EXPECT_EQ(trainer->step(), 1);
}

// One NaN pixel used to make every weight it reached NaN for good. Steps
// with non-finite inputs or targets, probability targets that are not
// distributions, or a loss that overflows are refused and change nothing.
TEST(DataParallelTrainerTest, NonFiniteStepsAreRefusedAndChangeNothing) {
  OptimizerConfig sgd;
  for (bool parameter_server : {false, true}) {
    std::unique_ptr<DataParallelTrainer> trainer =
        MakeTrainer(2, sgd, nullptr, parameter_server, DType::kFloat32);
    const std::vector<Tensor> before = trainer->SlotParameters(1).value();
    const Tensor labels = testing::ClassLabels(4, 4, 0);
    Tensor one_hot = Tensor::Host(DType::kFloat32, {4, 4});
    for (int64_t i = 0; i < 16; ++i) {
      one_hot.data<float>()[i] = i % 4 == labels.data<int64_t>()[i / 4] ? 1.0f : 0.0f;
    }
    auto refused = [&](const Tensor& images, const Tensor& targets, const std::string& text) {
      absl::StatusOr<DataParallelTrainer::StepResult> result = trainer->Step({images}, targets);
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << text;
      EXPECT_THAT(std::string(result.status().message()), HasSubstr(text));
    };
    const Tensor good = testing::RandomTensor({4, 2, 6, 6}, 1);
    Tensor nan_pixel = testing::RandomTensor({4, 2, 6, 6}, 1);
    nan_pixel.data<float>()[100] = std::nanf("");
    refused(nan_pixel, one_hot, "element 100 is nan; training takes finite values only");
    Tensor inf_pixel = testing::RandomTensor({4, 2, 6, 6}, 1);
    inf_pixel.data<float>()[7] = -INFINITY;
    refused(inf_pixel, one_hot, "element 7 is -inf");
    Tensor huge = Tensor::Host(DType::kFloat32, {4, 2, 6, 6});
    for (int64_t i = 0; i < huge.num_elements(); ++i) huge.data<float>()[i] = 3e38f;
    refused(huge, one_hot, "(not finite): its inputs overflow");
    Tensor bad_targets = Tensor::Host(DType::kFloat32, {4, 4});
    std::memcpy(bad_targets.raw_data(), one_hot.raw_data(), one_hot.byte_size());
    bad_targets.data<float>()[5] = std::nanf("");
    refused(good, bad_targets, "targets: element 5 is nan");
    bad_targets.data<float>()[5] = -0.5f;
    refused(good, bad_targets, "targets: element 5 (row 1, class 1) is -0.5");
    bad_targets.data<float>()[5] = 0.5f;
    refused(good, bad_targets, "targets: row 1 sums to 1.5");

    EXPECT_EQ(trainer->step(), 0);
    const std::vector<Tensor> after = trainer->SlotParameters(1).value();
    for (size_t p = 0; p < before.size(); ++p) {
      EXPECT_EQ(std::memcmp(before[p].raw_data(), after[p].raw_data(), before[p].byte_size()), 0)
          << "parameter " << p;
    }
    absl::StatusOr<DataParallelTrainer::StepResult> result = trainer->Step({good}, one_hot);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(std::isfinite(result->loss));
    EXPECT_EQ(trainer->step(), 1);
  }
}

// Finite inputs, loss and gradients can still overflow the update: a large
// learning rate on large gradients used to answer OK and leave every weight
// it reached infinite. The update is checked before any copy applies it,
// and such a step is refused (or skipped) like a non-finite gradient.
TEST(DataParallelTrainerTest, AnUpdateThatWouldOverflowIsRefusedAndChangesNothing) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1e4f;
  for (bool parameter_server : {false, true}) {
    for (auto non_finite :
         {TrainerOptions::NonFiniteSteps::kRefuse, TrainerOptions::NonFiniteSteps::kSkip}) {
      std::unique_ptr<DataParallelTrainer> trainer =
          MakeTrainer(2, sgd, nullptr, parameter_server, DType::kInt64, non_finite);
      const std::vector<Tensor> before = trainer->SlotParameters(1).value();
      Tensor large = Tensor::Host(DType::kFloat32, {4, 2, 6, 6});
      for (int64_t i = 0; i < large.num_elements(); ++i) large.data<float>()[i] = 3e35f;
      absl::StatusOr<DataParallelTrainer::StepResult> result =
          trainer->Step({large}, testing::ClassLabels(4, 4, 0));
      const std::string why = non_finite == TrainerOptions::NonFiniteSteps::kRefuse
                                  ? std::string(result.status().message())
                                  : (result.ok() ? result->skipped : "");
      if (non_finite == TrainerOptions::NonFiniteSteps::kRefuse) {
        EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
      } else {
        ASSERT_TRUE(result.ok()) << result.status();
      }
      EXPECT_THAT(why, HasSubstr("the update would make element"));
      EXPECT_THAT(why, HasSubstr("learning_rate 10000"));
      EXPECT_EQ(trainer->step(), 0);
      for (int slot : {0, 1}) {
        const std::vector<Tensor> after = trainer->SlotParameters(slot).value();
        for (size_t p = 0; p < before.size(); ++p) {
          EXPECT_EQ(std::memcmp(before[p].raw_data(), after[p].raw_data(), before[p].byte_size()),
                    0)
              << "slot " << slot << " parameter " << p;
        }
      }
      absl::StatusOr<DataParallelTrainer::StepResult> good =
          trainer->Step({testing::RandomTensor({4, 2, 6, 6}, 1)}, testing::ClassLabels(4, 4, 0));
      ASSERT_TRUE(good.ok()) << good.status();
      EXPECT_EQ(trainer->step(), 1);
    }
  }
}

// NonFiniteSteps::kSkip: an overflowing step answers OK as skipped, with
// its reason, and changes nothing; the next good step is step 1. Inputs
// holding NaN are still refused.
TEST(DataParallelTrainerTest, SkippedStepsChangeNothingAndDoNotCount) {
  for (bool parameter_server : {false, true}) {
    std::unique_ptr<DataParallelTrainer> trainer =
        MakeTrainer(2, OptimizerConfig{}, nullptr, parameter_server, DType::kInt64,
                    TrainerOptions::NonFiniteSteps::kSkip);
    const std::vector<Tensor> before = trainer->SlotParameters(1).value();
    const Tensor labels = testing::ClassLabels(4, 4, 0);
    Tensor huge = Tensor::Host(DType::kFloat32, {4, 2, 6, 6});
    for (int64_t i = 0; i < huge.num_elements(); ++i) huge.data<float>()[i] = 3e38f;
    absl::StatusOr<DataParallelTrainer::StepResult> skipped = trainer->Step({huge}, labels);
    ASSERT_TRUE(skipped.ok()) << skipped.status();
    EXPECT_THAT(skipped->skipped, HasSubstr("(not finite): its inputs overflow"));
    EXPECT_EQ(skipped->step, 0);
    EXPECT_EQ(skipped->samples, 4);
    EXPECT_EQ(skipped->slices.size(), 2u);  // Both slots ran their rows.
    Tensor nan_pixel = testing::RandomTensor({4, 2, 6, 6}, 1);
    nan_pixel.data<float>()[3] = std::nanf("");
    EXPECT_EQ(trainer->Step({nan_pixel}, labels).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(trainer->step(), 0);
    const std::vector<Tensor> after = trainer->SlotParameters(1).value();
    for (size_t p = 0; p < before.size(); ++p) {
      EXPECT_EQ(std::memcmp(before[p].raw_data(), after[p].raw_data(), before[p].byte_size()), 0)
          << "parameter " << p;
    }
    absl::StatusOr<DataParallelTrainer::StepResult> good =
        trainer->Step({testing::RandomTensor({4, 2, 6, 6}, 1)}, labels);
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_TRUE(good->skipped.empty());
    EXPECT_EQ(good->step, 1);
  }
}

// The PyTorch side: tests/core/train/torch_training_reference.py.
const std::string& TorchReferenceDir() {
  return testing::TorchReferenceOutput(REPLICAD_TRAINING_SCRIPT);
}

Tensor ReadReference(const std::string& name) {
  return testing::ReadNpyTensor(TorchReferenceDir() + "/" + name + ".npy");
}

std::string ValueName(const DataParallelTrainer& trainer, int value) {
  return trainer.model().graph().values[value].name;
}

// BatchNormalization (batch statistics, running statistics updated) and
// Dropout (p = 0) of a model exported by PyTorch in training mode: one slot,
// 5 SGD steps, against PyTorch doing the same steps. Losses within 1e-4
// relative, every weight and running statistic within 1e-4 relative L2.
TEST(DataParallelTrainerTest, BatchNormalizationTrainsLikePyTorch) {
  ASSERT_FALSE(TorchReferenceDir().empty());
  OptimizerConfig sgd;
  sgd.learning_rate = 0.1f;
  sgd.momentum = 0.9f;
  std::unique_ptr<DataParallelTrainer> trainer = MakeTrainer(
      1, sgd,
      testing::LoadForTraining(testing::ReadFileBytes(TorchReferenceDir() + "/bn_p0.onnx")));
  ASSERT_NE(trainer, nullptr);
  ASSERT_EQ(trainer->training_graph().buffers.size(), 2u);  // running mean and variance.
  const Tensor x = ReadReference("x");
  const Tensor labels = ReadReference("labels");
  const Tensor losses = ReadReference("losses");
  for (int64_t step = 0; step < 5; ++step) {
    absl::StatusOr<Tensor> images = x.SliceRows(step, step + 1);
    absl::StatusOr<Tensor> targets = labels.SliceRows(step, step + 1);
    ASSERT_TRUE(images.ok() && targets.ok());
    Tensor batch = Tensor::Host(DType::kFloat32, {8, 1, 8, 8});
    std::memcpy(batch.raw_data(), images->raw_data(), batch.byte_size());
    Tensor batch_labels = Tensor::Host(DType::kInt64, {8});
    std::memcpy(batch_labels.raw_data(), targets->raw_data(), batch_labels.byte_size());
    absl::StatusOr<DataParallelTrainer::StepResult> result = trainer->Step({batch}, batch_labels);
    ASSERT_TRUE(result.ok()) << result.status();
    const double expected = losses.data<float>()[step];
    EXPECT_NEAR(result->loss, expected, 1e-4 * std::fabs(expected)) << "step " << step;
  }
  const std::vector<Tensor> parameters = trainer->SlotParameters(0).value();
  const std::vector<Tensor> buffers = trainer->SlotBuffers(0).value();
  const TrainingGraph& training = trainer->training_graph();
  for (size_t p = 0; p < parameters.size(); ++p) {
    const std::string name = ValueName(*trainer, training.parameters[p]);
    EXPECT_LE(testing::RelativeL2(parameters[p], ReadReference("after_" + name)), 1e-4) << name;
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    const std::string name = ValueName(*trainer, training.buffers[b]);
    EXPECT_LE(testing::RelativeL2(buffers[b], ReadReference("after_" + name)), 1e-4) << name;
  }
}

// SyncBatchNorm and Dropout (p = 0.3) over 1, 2 and 3 slots with batches 7,
// 2 and 64: the same losses, weights and running statistics after 5 steps
// within 1e-5 relative, since the statistics are the whole batch's and the
// masks are keyed by global row.
TEST(DataParallelTrainerTest, SyncBatchNormAndDropoutTrainAlikeOnAnySplit) {
  ASSERT_FALSE(TorchReferenceDir().empty());
  const std::string onnx = testing::ReadFileBytes(TorchReferenceDir() + "/bn_p3.onnx");
  OptimizerConfig sgd;
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  for (int64_t batch : {7, 2, 64}) {
    std::vector<std::vector<Tensor>> weights_by_slots;
    std::vector<std::vector<double>> losses_by_slots;
    for (int slots : {1, 2, 3}) {
      std::unique_ptr<DataParallelTrainer> trainer =
          MakeTrainer(slots, sgd, testing::LoadForTraining(onnx));
      ASSERT_NE(trainer, nullptr);
      std::vector<double> losses;
      for (int step = 0; step < 5; ++step) {
        Tensor labels = Tensor::Host(DType::kInt64, {batch});
        for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = (i + step) % 3;
        absl::StatusOr<DataParallelTrainer::StepResult> result =
            trainer->Step({testing::RandomTensor({batch, 1, 8, 8}, 40 + step)}, labels);
        ASSERT_TRUE(result.ok()) << result.status();
        losses.push_back(result->loss);
      }
      std::vector<Tensor> weights = trainer->SlotParameters(0).value();
      std::vector<Tensor> slot_buffers = trainer->SlotBuffers(0).value();
      for (Tensor& b : slot_buffers) weights.push_back(std::move(b));
      for (int s = 1; s < slots; ++s) {
        std::vector<Tensor> other = trainer->SlotParameters(s).value();
        std::vector<Tensor> other_buffers = trainer->SlotBuffers(s).value();
        for (Tensor& b : other_buffers) other.push_back(std::move(b));
        for (size_t w = 0; w < other.size(); ++w) {
          EXPECT_EQ(std::memcmp(other[w].raw_data(), weights[w].raw_data(), other[w].byte_size()),
                    0)
              << "slot " << s << " tensor " << w;
        }
      }
      weights_by_slots.push_back(std::move(weights));
      losses_by_slots.push_back(std::move(losses));
    }
    for (size_t k = 1; k < weights_by_slots.size(); ++k) {
      for (int step = 0; step < 5; ++step) {
        EXPECT_NEAR(losses_by_slots[k][step], losses_by_slots[0][step],
                    1e-5 * std::fabs(losses_by_slots[0][step]))
            << k + 1 << " slots, batch " << batch << ", step " << step;
      }
      for (size_t w = 0; w < weights_by_slots[0].size(); ++w) {
        EXPECT_LE(testing::RelativeL2(weights_by_slots[k][w], weights_by_slots[0][w]), 1e-5)
            << k + 1 << " slots, batch " << batch << ", tensor " << w;
      }
    }
  }
}

}  // namespace
}  // namespace replicad
