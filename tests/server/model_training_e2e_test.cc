// TrainStep, ConfigureTraining and SaveCheckpoint against the real daemon:
// training changes what Predict answers (and checkpoints hold exactly those
// weights), bad requests are answered precisely and lose nothing, a restart
// on a checkpoint resumes bit for bit, and SIGKILL while checkpointing
// leaves a loadable checkpoint.
//
// Also: a client may send class labels in one step and probabilities in the next; Predict in a loop
// while steps run finds every answer equal to what one step's checkpoint computes; SIGKILL of the
// daemon while it checkpoints every step.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/replicad_client.h"
#include "core/model/default_model.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/train/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/proto_tensors.h"
#include "tests/testing/test_models.h"
#include "tests/testing/training_requests.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using testing::DaemonProcess;
using testing::FromProto;
using ::testing::HasSubstr;
using testing::ToProto;

std::unique_ptr<client::ReplicadClient> Connect(const DaemonProcess& daemon) {
  return *client::ReplicadClient::Connect(daemon.target(), {});
}

using testing::SgdConfig;

Tensor Labels(int64_t batch, int64_t first) { return testing::DefaultModelLabels(batch, first); }

v1::TrainStepRequest StepRequest(int64_t batch, uint64_t seed,
                                 const std::string& model = "default") {
  return testing::DefaultModelStep(batch, seed, model);
}

// SgdConfig with a checkpoint into `dir` after every step.
v1::ConfigureTrainingRequest EveryStepConfig(const std::string& dir) {
  v1::ConfigureTrainingRequest request = SgdConfig();
  request.mutable_config()->set_checkpoint_every_steps(1);
  request.mutable_config()->set_checkpoint_dir(dir);
  return request;
}

v1::PredictRequest ImageRequest(int64_t batch, uint64_t seed) {
  v1::PredictRequest request;
  request.set_model("default");
  *request.add_inputs() = ToProto("image", testing::RandomTensor({batch, 1, 28, 28}, seed));
  request.add_output_names("logits");
  return request;
}

std::string CheckpointDir() {
  const std::string dir =
      std::filesystem::path(::testing::TempDir() + "/model_training_e2e").lexically_normal();
  std::filesystem::create_directories(dir);
  return dir;
}

std::string TempPath(const std::string& name) { return CheckpointDir() + "/" + name; }

// A daemon whose clients may write checkpoints under CheckpointDir().
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartWithCheckpoints(std::vector<std::string> args) {
  args.push_back("--checkpoint-root");
  args.push_back(CheckpointDir());
  return DaemonProcess::Start(args);
}

// The numbered checkpoints of model "default" in `dir`
// (core/train/checkpoint_rotation.h), oldest first.
std::vector<std::string> NumberedCheckpoints(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("default-step", 0) == 0 && name.size() > 5 &&
        name.compare(name.size() - 5, 5, ".onnx") == 0) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());  // Zero-padded steps sort as numbers.
  return files;
}

std::string NewestCheckpoint(const std::string& dir) {
  std::vector<std::string> files = NumberedCheckpoints(dir);
  return files.empty() ? "" : files.back();
}

// The value of one series in the daemon's /metrics, or -1 when absent.
double MetricValue(const DaemonProcess& daemon, const std::string& series) {
  absl::StatusOr<std::string> page = testing::HttpGet(daemon.metrics_port(), "/metrics");
  if (!page.ok()) return -1;
  const size_t at = page->find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(page->c_str() + at + series.size() + 2, nullptr);
}

// Predict answers with the latest step's weights: exactly those a checkpoint
// written then holds (computed here in-process from the checkpoint file).
TEST(ModelTrainingE2eTest, PredictAndCheckpointsFollowTheTrainedWeights) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0,cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  absl::StatusOr<v1::ConfigureTrainingResponse> configured = client->ConfigureTraining(SgdConfig());
  ASSERT_TRUE(configured.ok()) << configured.status();
  EXPECT_EQ(configured->config().output(), "logits");  // Default: the first output.
  EXPECT_EQ(configured->config().loss(), v1::LOSS_SOFTMAX_CROSS_ENTROPY);
  EXPECT_FLOAT_EQ(configured->config().optimizer().beta2(), 0.999f);  // Filled in.

  absl::StatusOr<v1::PredictResponse> before = client->Predict(ImageRequest(6, 5));
  ASSERT_TRUE(before.ok()) << before.status();
  for (int step = 1; step <= 2; ++step) {
    absl::StatusOr<v1::TrainStepResponse> trained = client->TrainStep(StepRequest(7, step));
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_EQ(trained->step(), step);
    EXPECT_EQ(trained->samples(), 7);
    EXPECT_TRUE(trained->has_accuracy());
    EXPECT_GT(trained->loss(), 0.0);
    ASSERT_EQ(trained->replicas_size(), 2);
    EXPECT_EQ(trained->replicas(0).end(), 4);
    EXPECT_EQ(trained->replicas(1).begin(), 4);
  }
  const std::string path = TempPath("predict.onnx");
  v1::SaveCheckpointRequest save;
  save.set_model("default");
  save.set_path(path);
  absl::StatusOr<v1::SaveCheckpointResponse> saved = client->SaveCheckpoint(save);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->step(), 2);

  // A new configuration keeps the weights: Predict still answers with them.
  ASSERT_TRUE(client->ConfigureTraining(SgdConfig()).ok());
  absl::StatusOr<v1::PredictResponse> after = client->Predict(ImageRequest(6, 5));
  ASSERT_TRUE(after.ok()) << after.status();
  const Tensor before_logits = FromProto(before->outputs(0));
  const Tensor after_logits = FromProto(after->outputs(0));
  EXPECT_GT(testing::RelativeL2(after_logits, before_logits), 1e-3) << "weights did not change";

  absl::StatusOr<std::shared_ptr<const Model>> checkpoint = LoadOnnxFile(path, "checkpoint");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::unique_ptr<ReplicaSet> reference = testing::MakeCpuReplicaSet(*checkpoint, {1});
  testing::PredictOutcome expected =
      testing::PredictAndWait(*reference, {FromProto(ImageRequest(6, 5).inputs(0))});
  ASSERT_TRUE(expected.status.ok()) << expected.status;
  EXPECT_LE(testing::RelativeL2(after_logits, expected.outputs[0]), 1e-5);

  // replicactl writes the same checkpoint.
  const std::string again = TempPath("predict_again.onnx");
  testing::CommandResult saved_again =
      testing::RunCommand({testing::BinDir() + "/replicactl", "--server", (*daemon)->target(),
                           "save-checkpoint", "--model", "default", "--path", again});
  EXPECT_EQ(saved_again.exit_code, 0) << saved_again.out;
  EXPECT_THAT(saved_again.out, HasSubstr("checkpoint: " + again + " (step 2)"));
  absl::StatusOr<LoadedCheckpoint> first = ReadCheckpoint(path), second = ReadCheckpoint(again);
  ASSERT_TRUE(first.ok() && second.ok());
  for (const auto& [name, tensor] : first->checkpoint.parameters) {
    EXPECT_EQ(std::memcmp(tensor.raw_data(), second->checkpoint.parameters.at(name).raw_data(),
                          tensor.byte_size()),
              0)
        << name;
  }

  absl::StatusOr<std::string> metrics = testing::HttpGet((*daemon)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics,
              AllOf(HasSubstr("replicad_train_steps_total{model=\"default\"} 2"),
                    HasSubstr("replicad_train_samples_total{model=\"default\"} 14"),
                    HasSubstr("slot=\"r1\",phase=\"backward\"}"), HasSubstr("phase=\"reduce\"}"),
                    HasSubstr("phase=\"queue\"}"), HasSubstr("replicad_train_loss")));
  const size_t body = metrics->find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  const std::string file = TempPath("train_metrics.txt");
  std::ofstream(file) << metrics->substr(body + 4);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0) << (*daemon)->output();
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "no promtool";
  testing::CommandResult check =
      testing::RunCommand({"/bin/sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(check.exit_code, 0) << check.out;
}

// Model parallelism: the default model placed over two contexts
// (convolutions on dev0, classifier on dev1) trains through its pipeline in
// 4 micro-batches (GPipe) like one data-parallel slot: five SGD steps
// (momentum) give the same losses, the same trained answers and a
// checkpoint (one ONNX file) of the same weights, within 1e-6 relative.
TEST(ModelTrainingE2eTest, APlacedModelTrainsThroughItsPipelineLikeOneSlot) {
  struct Run {
    std::vector<double> losses;
    Tensor logits;
    std::string checkpoint;
  };
  Run runs[2];
  for (int placed = 0; placed < 2; ++placed) {
    std::vector<std::string> flags = {"--devices", "cpu:0"};
    if (placed == 1) {
      flags = {"--device-map",           "dev0->cpu:0;dev1->cpu:0", "--placement",
               "conv*->dev0; fc*->dev1", "--micro-batches",         "4"};
    }
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = StartWithCheckpoints(flags);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = Connect(**daemon);
    ASSERT_TRUE(client->ConfigureTraining(SgdConfig()).ok());
    for (int step = 1; step <= 5; ++step) {
      absl::StatusOr<v1::TrainStepResponse> trained = client->TrainStep(StepRequest(7, step));
      ASSERT_TRUE(trained.ok()) << trained.status();
      EXPECT_EQ(trained->step(), step);
      EXPECT_TRUE(trained->has_accuracy());
      runs[placed].losses.push_back(trained->loss());
    }
    runs[placed].checkpoint = TempPath(placed == 1 ? "pipeline.onnx" : "one_slot.onnx");
    v1::SaveCheckpointRequest save;
    save.set_model("default");
    save.set_path(runs[placed].checkpoint);
    absl::StatusOr<v1::SaveCheckpointResponse> saved = client->SaveCheckpoint(save);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(saved->step(), 5);
    absl::StatusOr<v1::PredictResponse> after = client->Predict(ImageRequest(6, 5));
    ASSERT_TRUE(after.ok()) << after.status();
    runs[placed].logits = FromProto(after->outputs(0));
    if (placed == 1) {
      absl::StatusOr<v1::ModelInfo> info = client->GetModel("default");
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->replicas(0).device(), "dev0=cpu:0+dev1=cpu:0");  // Still the pipeline.
    }
    EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0) << (*daemon)->output();
  }
  EXPECT_NE(runs[0].losses.front(), runs[0].losses.back()) << "training moved nothing";
  for (int step = 0; step < 5; ++step) {
    EXPECT_NEAR(runs[1].losses[step], runs[0].losses[step], 1e-6 * runs[0].losses[step]) << step;
  }
  EXPECT_LE(testing::RelativeL2(runs[1].logits, runs[0].logits), 1e-6);
  absl::StatusOr<LoadedCheckpoint> one = ReadCheckpoint(runs[0].checkpoint);
  absl::StatusOr<LoadedCheckpoint> pipeline = ReadCheckpoint(runs[1].checkpoint);
  ASSERT_TRUE(one.ok() && pipeline.ok());
  EXPECT_EQ(pipeline->checkpoint.step, 5);
  ASSERT_EQ(pipeline->checkpoint.parameters.size(), one->checkpoint.parameters.size());
  for (const auto& [name, weight] : one->checkpoint.parameters) {
    EXPECT_LE(testing::RelativeL2(pipeline->checkpoint.parameters.at(name), weight), 1e-6) << name;
  }
}

// Predict while TrainSteps run: every answer is the model of one whole step
// (equal to what that step's checkpoint computes in-process), never a mix.
TEST(ModelTrainingE2eTest, PredictDuringTrainingSeesOneStepsWeights) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0,cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto trainer_client = Connect(**daemon);
  auto predict_client = Connect(**daemon);
  ASSERT_TRUE(trainer_client->ConfigureTraining(SgdConfig()).ok());
  constexpr int kSteps = 6;
  std::vector<std::string> checkpoints;
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    for (int step = 1; step <= kSteps; ++step) {
      EXPECT_TRUE(trainer_client->TrainStep(StepRequest(16, step)).ok());
      v1::SaveCheckpointRequest save;
      save.set_model("default");
      save.set_path(TempPath(absl::StrCat("during_", step, ".onnx")));
      EXPECT_TRUE(trainer_client->SaveCheckpoint(save).ok());
      checkpoints.push_back(save.path());
    }
    done = true;
  });
  const v1::PredictRequest request = ImageRequest(8, 9);
  std::vector<Tensor> answers;
  while (!done.load()) {
    absl::StatusOr<v1::PredictResponse> response = predict_client->Predict(request);
    ASSERT_TRUE(response.ok()) << response.status();
    answers.push_back(FromProto(response->outputs(0)));
  }
  trainer.join();
  ASSERT_EQ(checkpoints.size(), static_cast<size_t>(kSteps));
  EXPECT_GE(answers.size(), 2u);

  std::vector<Tensor> references;  // Step 0 (the embedded weights), then each checkpoint.
  std::vector<std::shared_ptr<const Model>> models = {*LoadDefaultModel()};
  for (const std::string& path : checkpoints) models.push_back(*LoadOnnxFile(path, "default"));
  for (const auto& model : models) {
    std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model, {1});
    testing::PredictOutcome outcome = testing::PredictAndWait(*set, {FromProto(request.inputs(0))});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    references.push_back(outcome.outputs[0]);
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    double closest = 1e9;
    for (const Tensor& reference : references) {
      closest = std::min(closest, testing::RelativeL2(answers[i], reference));
    }
    EXPECT_LE(closest, 1e-5) << "answer " << i << " matches no step's weights";
  }
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0) << (*daemon)->output();
}

// Without --checkpoint-root a client can have nothing written.
TEST(ModelTrainingE2eTest, WithoutACheckpointRootNothingIsWritten) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start({"--devices", "cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  ASSERT_TRUE(client->TrainStep(StepRequest(4, 1)).ok());
  v1::SaveCheckpointRequest save;
  save.set_model("default");
  save.set_path(TempPath("no_root.onnx"));
  absl::StatusOr<v1::SaveCheckpointResponse> saved = client->SaveCheckpoint(save);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(saved.status().message()), HasSubstr("--checkpoint-root DIR"));
  EXPECT_FALSE(std::filesystem::exists(TempPath("no_root.onnx")));
  v1::ConfigureTrainingRequest periodic = EveryStepConfig(CheckpointDir());
  EXPECT_EQ(client->ConfigureTraining(periodic).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0) << (*daemon)->output();
}

TEST(ModelTrainingE2eTest, BadRequestsAreAnsweredPreciselyAndLoseNothing) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0,cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  auto expect_error = [&](const v1::TrainStepRequest& request, absl::StatusCode code,
                          const std::string& text) {
    absl::StatusOr<v1::TrainStepResponse> response = client->TrainStep(request);
    ASSERT_FALSE(response.ok());
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(text));
  };
  // Float labels where the loss wants int64 classes or float probabilities;
  // then int64 labels still train (the first request does not fix the form).
  v1::TrainStepRequest float_labels = StepRequest(4, 1);
  *float_labels.mutable_targets() = ToProto("targets", testing::RandomTensor({4}, 3));
  expect_error(float_labels, absl::StatusCode::kInvalidArgument,
               "targets: softmax cross-entropy takes int64 [N] class labels or float32 [N, C] "
               "probabilities, received float32[4]");
  // A claimed shape whose size overflows: refused, not allocated.
  v1::TrainStepRequest huge = StepRequest(4, 1);
  huge.mutable_inputs(0)->clear_shape();
  for (int64_t d : {int64_t{1} << 62, int64_t{1}, int64_t{28}, int64_t{28}}) {
    huge.mutable_inputs(0)->add_shape(d);
  }
  huge.mutable_inputs(0)->clear_raw();
  expect_error(huge, absl::StatusCode::kInvalidArgument, "more elements than can be addressed");
  v1::PredictRequest huge_predict = ImageRequest(1, 1);
  *huge_predict.mutable_inputs(0) = huge.inputs(0);
  EXPECT_EQ(client->Predict(huge_predict).status().code(), absl::StatusCode::kInvalidArgument);
  v1::TrainStepRequest missing = StepRequest(4, 1);
  missing.clear_targets();
  expect_error(missing, absl::StatusCode::kInvalidArgument, "targets: missing");
  v1::TrainStepRequest short_targets = StepRequest(4, 1);
  *short_targets.mutable_targets() = ToProto("targets", Labels(3, 0));
  expect_error(short_targets, absl::StatusCode::kInvalidArgument,
               "targets: shape expected [4, ...] (the inputs' batch), received [3]");
  v1::TrainStepRequest out_of_range = StepRequest(4, 1);
  Tensor labels = Labels(4, 0);
  labels.data<int64_t>()[2] = 12;
  *out_of_range.mutable_targets() = ToProto("targets", labels);
  expect_error(out_of_range, absl::StatusCode::kInvalidArgument,
               "must be a class in [0, 10), received 12");
  v1::TrainStepRequest truncated = StepRequest(4, 1);
  truncated.mutable_targets()->mutable_raw()->resize(5);
  expect_error(truncated, absl::StatusCode::kInvalidArgument, "targets: raw holds 5 bytes");
  // One NaN pixel (image[0, 0, 14, 14]) used to make every conv1 weight NaN.
  v1::TrainStepRequest nan_pixel = StepRequest(4, 1);
  Tensor nan_image = testing::RandomTensor({4, 1, 28, 28}, 1);
  nan_image.data<float>()[14 * 28 + 14] = std::nanf("");
  *nan_pixel.mutable_inputs(0) = ToProto("image", nan_image);
  expect_error(nan_pixel, absl::StatusCode::kInvalidArgument,
               "input 'image': element 406 is nan; training takes finite values only");
  v1::TrainStepRequest unknown = StepRequest(4, 1, "nope");
  expect_error(unknown, absl::StatusCode::kNotFound, "model: 'nope' is not served");
  // A megabyte of model name is quoted in 256 bytes, and the answer still
  // says what is served.
  v1::TrainStepRequest long_name = StepRequest(4, 1, std::string(1 << 20, 'm'));
  absl::StatusOr<v1::TrainStepResponse> long_answer = client->TrainStep(long_name);
  EXPECT_EQ(long_answer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_LT(long_answer.status().message().size(), 1024u);
  EXPECT_THAT(std::string(long_answer.status().message()),
              AllOf(HasSubstr("(1048320 more bytes)"), HasSubstr("served models: default")));

  v1::ConfigureTrainingRequest bad_lr = SgdConfig();
  bad_lr.mutable_config()->mutable_optimizer()->set_learning_rate(-1);
  absl::StatusOr<v1::ConfigureTrainingResponse> configured = client->ConfigureTraining(bad_lr);
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(configured.status().message()),
              HasSubstr("config.optimizer.learning_rate must be > 0 and <= 10000; received -1"));
  v1::ConfigureTrainingRequest bad_output = SgdConfig();
  bad_output.mutable_config()->set_output("nope");
  configured = client->ConfigureTraining(bad_output);
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(configured.status().message()),
              AllOf(HasSubstr("config.output"), HasSubstr("'nope'"), HasSubstr("logits")));
  // Enum values the proto does not define are refused, naming the field.
  v1::ConfigureTrainingRequest bad_kind = SgdConfig();
  bad_kind.mutable_config()->mutable_optimizer()->set_kind(static_cast<v1::OptimizerKind>(99));
  configured = client->ConfigureTraining(bad_kind);
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(configured.status().message()),
              AllOf(HasSubstr("config.optimizer.kind: expected one of"),
                    HasSubstr("OPTIMIZER_ADAM"), HasSubstr("received 99")));
  v1::ConfigureTrainingRequest bad_loss = SgdConfig();
  bad_loss.mutable_config()->set_loss(static_cast<v1::Loss>(99));
  EXPECT_THAT(std::string(client->ConfigureTraining(bad_loss).status().message()),
              HasSubstr("config.loss: expected one of"));
  v1::ConfigureTrainingRequest bad_reduction = SgdConfig();
  bad_reduction.mutable_config()->set_reduction(static_cast<v1::GradientReduction>(99));
  EXPECT_THAT(std::string(client->ConfigureTraining(bad_reduction).status().message()),
              HasSubstr("config.reduction: expected one of"));
  v1::ConfigureTrainingRequest ps = SgdConfig();
  ps.mutable_config()->set_reduction(v1::GRADIENT_REDUCTION_PS);
  configured = client->ConfigureTraining(ps);
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(configured.status().message()), HasSubstr("config.ps_device must name"));
  ps.mutable_config()->set_ps_device("cpu:99");
  configured = client->ConfigureTraining(ps);
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(configured.status().message()),
              AllOf(HasSubstr("'cpu:99' does not exist"), HasSubstr("available: cpu:0")));
  v1::SaveCheckpointRequest nothing;
  nothing.set_model("default");
  nothing.set_path(TempPath("never.onnx"));
  EXPECT_EQ(client->SaveCheckpoint(nothing).status().code(), absl::StatusCode::kFailedPrecondition);
  // Writes outside --checkpoint-root are refused, naming the path, and create nothing.
  for (const std::string& outside :
       {std::string("/tmp/pwned_by_client.onnx"), std::string("../../x.onnx")}) {
    v1::SaveCheckpointRequest escape;
    escape.set_model("default");
    escape.set_path(outside);
    absl::StatusOr<v1::SaveCheckpointResponse> saved = client->SaveCheckpoint(escape);
    EXPECT_EQ(saved.status().code(), absl::StatusCode::kPermissionDenied) << outside;
    EXPECT_THAT(std::string(saved.status().message()), HasSubstr("path: '" + outside + "'"));
  }
  EXPECT_FALSE(std::filesystem::exists("/tmp/pwned_by_client.onnx"));
  v1::ConfigureTrainingRequest escape_dir = EveryStepConfig("/etc");
  configured = client->ConfigureTraining(escape_dir);
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(configured.status().message()),
              HasSubstr("config.checkpoint_dir: '/etc' is outside the checkpoint root"));
  configured = client->ConfigureTraining(EveryStepConfig("no_such_dir"));
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(configured.status().message()),
              HasSubstr("config.checkpoint_dir: 'no_such_dir' is not a directory under the "
                        "checkpoint root; create it first"));

  // None of that counted: the first good step is step 1.
  absl::StatusOr<v1::TrainStepResponse> good = client->TrainStep(StepRequest(4, 1));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->step(), 1);
  // A parameter server on cpu:0 takes over; the step count goes on.
  ps.mutable_config()->set_ps_device("cpu:0");
  configured = client->ConfigureTraining(ps);
  ASSERT_TRUE(configured.ok()) << configured.status();
  EXPECT_EQ(configured->step(), 1);  // The steps taken so far.
  good = client->TrainStep(StepRequest(4, 2));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->step(), 2);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0) << (*daemon)->output();
}

TEST(ModelTrainingE2eTest, AModelWithoutGradientsIsRefusedNamingTheOpAndStillPredicts) {
  const std::string path = TempPath("sigmoid.onnx");
  std::ofstream(path, std::ios::binary) << testing::UntrainableOnnx();
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0", "--model", "s=" + path});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  v1::TrainStepRequest request;
  request.set_model("s");
  *request.add_inputs() = ToProto("x", testing::RandomTensor({2, 3}, 2));
  *request.mutable_targets() = ToProto("targets", testing::RandomTensor({2, 2}, 3));
  absl::StatusOr<v1::TrainStepResponse> response = client->TrainStep(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(response.status().message()),
              AllOf(HasSubstr("Softplus (node 'y')"), HasSubstr("cannot be trained")));
  v1::PredictRequest predict;
  predict.set_model("s");
  *predict.add_inputs() = ToProto("x", testing::RandomTensor({2, 3}, 2));
  EXPECT_TRUE(client->Predict(predict).ok());
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0) << (*daemon)->output();
}

// Three steps, a checkpoint, a fourth step; and, from a daemon restarted on
// the checkpoint, the same fourth step: the weights agree bit for bit, so
// the step count and the momentum buffers were restored.
TEST(ModelTrainingE2eTest, RestartingOnACheckpointResumesExactly) {
  const std::string path = TempPath("resume.onnx");
  const std::string after_four = TempPath("after_four.onnx");
  const std::string resumed_four = TempPath("resumed_four.onnx");
  auto save = [](client::ReplicadClient& client, const std::string& to) {
    v1::SaveCheckpointRequest request;
    request.set_model("default");
    request.set_path(to);
    return client.SaveCheckpoint(request);
  };
  {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        StartWithCheckpoints({"--devices", "cpu:0,cpu:0"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = Connect(**daemon);
    ASSERT_TRUE(client->ConfigureTraining(SgdConfig()).ok());
    for (int step = 1; step <= 3; ++step) ASSERT_TRUE(client->TrainStep(StepRequest(6, step)).ok());
    ASSERT_TRUE(save(*client, path).ok());
    ASSERT_TRUE(client->TrainStep(StepRequest(6, 4)).ok());
    ASSERT_TRUE(save(*client, after_four).ok());
    EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0,cpu:0", "--model", "default=" + path});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  ASSERT_TRUE(client->ConfigureTraining(SgdConfig()).ok());
  absl::StatusOr<v1::TrainStepResponse> step = client->TrainStep(StepRequest(6, 4));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->step(), 4);
  ASSERT_TRUE(save(*client, resumed_four).ok());
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
  {
    // Restarted on the same checkpoint but configured without momentum: its
    // momentum buffers do not fit; training starts the optimizer afresh.
    absl::StatusOr<std::unique_ptr<DaemonProcess>> other =
        StartWithCheckpoints({"--devices", "cpu:0", "--model", "default=" + path});
    ASSERT_TRUE(other.ok()) << other.status();
    auto other_client = Connect(**other);
    v1::ConfigureTrainingRequest plain = SgdConfig();
    plain.mutable_config()->mutable_optimizer()->clear_momentum();
    ASSERT_TRUE(other_client->ConfigureTraining(plain).ok());
    absl::StatusOr<v1::TrainStepResponse> fresh = other_client->TrainStep(StepRequest(6, 4));
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    EXPECT_EQ(fresh->step(), 4);
    EXPECT_EQ((*other)->StopWith(SIGTERM), 0);
  }
  absl::StatusOr<LoadedCheckpoint> a = ReadCheckpoint(after_four);
  absl::StatusOr<LoadedCheckpoint> b = ReadCheckpoint(resumed_four);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->checkpoint.parameters.size(), b->checkpoint.parameters.size());
  for (const auto& [name, tensor] : a->checkpoint.parameters) {
    const Tensor& other = b->checkpoint.parameters.at(name);
    EXPECT_EQ(std::memcmp(tensor.raw_data(), other.raw_data(), tensor.byte_size()), 0) << name;
  }
}

// fp16 from a scale that overflows: the scale comes down over the steps, and
// a checkpoint keeps where it stands (as GradScaler's state_dict does): a
// daemon restarted on it trains its next step at that scale, not at
// initial_loss_scale again.
TEST(ModelTrainingE2eTest, Float16LossScaleResumesFromACheckpoint) {
  const std::string path = TempPath("fp16_resume.onnx");
  v1::ConfigureTrainingRequest config = SgdConfig();
  config.mutable_config()->set_precision("fp16");
  config.mutable_config()->set_initial_loss_scale(std::ldexp(1.0, 30));
  double next_scale = 0;
  {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        StartWithCheckpoints({"--devices", "cpu:0,cpu:0"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = Connect(**daemon);
    ASSERT_TRUE(client->ConfigureTraining(config).ok());
    double last_scale = 0;
    bool last_skipped = false;
    int applied = 0;
    for (int step = 1; step <= 40; ++step) {
      absl::StatusOr<v1::TrainStepResponse> answer = client->TrainStep(StepRequest(6, step));
      ASSERT_TRUE(answer.ok()) << answer.status();
      last_scale = answer->loss_scale();
      last_skipped = !answer->skipped().empty();
      applied += !last_skipped;
    }
    EXPECT_GT(applied, 0);
    // Growth interval 2000: after an applied step the scale stays; after a
    // skipped one it halved.
    next_scale = last_skipped ? last_scale / 2 : last_scale;
    EXPECT_LT(next_scale, std::ldexp(1.0, 30)) << "2^30 never overflowed";
    v1::SaveCheckpointRequest save;
    save.set_model("default");
    save.set_path(path);
    absl::StatusOr<v1::SaveCheckpointResponse> saved = client->SaveCheckpoint(save);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0,cpu:0", "--model", "default=" + path});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  ASSERT_TRUE(client->ConfigureTraining(config).ok());
  absl::StatusOr<v1::TrainStepResponse> resumed = client->TrainStep(StepRequest(6, 41));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->loss_scale(), next_scale);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
}

// DownloadModel: the model's ONNX file with its weights, in pieces. Before a
// step, the file the daemon loaded (any caller with infer); after steps, the
// checkpoint's file, whose weights are SaveCheckpoint's, and a caller with
// infer alone is refused (what training made is training's to hand out).
TEST(ModelTrainingE2eTest, DownloadModelGivesTheTrainedWeightsToTrainersOnly) {
  const std::string tokens = TempPath("download_tokens");
  std::ofstream(tokens) << "infer-only-0123456789abcdef infer\n"
                        << "trainer-0123456789abcdef infer,train\n";
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0,cpu:0", "--auth-tokens", tokens});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto channel = grpc::CreateChannel((*daemon)->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::Replicad::NewStub(channel);
  struct Download {
    grpc::Status status;
    std::string onnx;
    int64_t step = -1;
    int pieces = 0;
  };
  const auto download = [&](const std::string& token) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::DownloadModelRequest request;
    request.set_model("default");
    auto reader = stub->DownloadModel(&context, request);
    Download got;
    v1::ModelChunk chunk;
    int64_t total = -1;
    while (reader->Read(&chunk)) {
      if (got.pieces++ == 0) {
        got.step = chunk.step();
        total = chunk.total_bytes();
      }
      got.onnx += chunk.data();
    }
    got.status = reader->Finish();
    if (got.status.ok()) {
      EXPECT_EQ(static_cast<int64_t>(got.onnx.size()), total);
    }
    return got;
  };
  Download untrained = download("infer-only-0123456789abcdef");
  ASSERT_TRUE(untrained.status.ok()) << untrained.status.error_message();
  EXPECT_EQ(untrained.step, 0);
  EXPECT_EQ(untrained.onnx, DefaultModelOnnxBytes());

  client::ClientOptions options;
  options.token = "trainer-0123456789abcdef";
  auto client = client::ReplicadClient::Connect((*daemon)->target(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->ConfigureTraining(SgdConfig()).ok());
  for (int step = 1; step <= 2; ++step) {
    ASSERT_TRUE((*client)->TrainStep(StepRequest(6, step)).ok());
  }
  Download refused = download("infer-only-0123456789abcdef");
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << refused.status.error_message();
  Download trained = download("trainer-0123456789abcdef");
  ASSERT_TRUE(trained.status.ok()) << trained.status.error_message();
  EXPECT_EQ(trained.step, 2);

  const std::string saved = TempPath("download_saved.onnx");
  v1::SaveCheckpointRequest save;
  save.set_model("default");
  save.set_path(saved);
  ASSERT_TRUE((*client)->SaveCheckpoint(save).ok());
  const std::string downloaded = TempPath("download_got.onnx");
  std::ofstream(downloaded, std::ios::binary) << trained.onnx;
  absl::StatusOr<LoadedCheckpoint> a = ReadCheckpoint(saved);
  absl::StatusOr<LoadedCheckpoint> b = ReadCheckpoint(downloaded);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->checkpoint.step, 2);
  ASSERT_EQ(a->checkpoint.parameters.size(), b->checkpoint.parameters.size());
  for (const auto& [name, tensor] : a->checkpoint.parameters) {
    const Tensor& other = b->checkpoint.parameters.at(name);
    EXPECT_EQ(std::memcmp(tensor.raw_data(), other.raw_data(), tensor.byte_size()), 0) << name;
  }
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
}

// checkpoint_every_steps = 1 while steps run back to back, and SIGKILL at
// random moments: whatever the daemon was doing, the checkpoint on disk loads.
TEST(ModelTrainingE2eTest, SigkillWhileCheckpointingLeavesTheLastCheckpointLoadable) {
  const std::string dir = TempPath("every_step");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::mt19937 rng(11);
  int64_t last_step = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::string> args = {"--devices", "cpu:0", "--keep-checkpoints", "2"};
    const std::string checkpoint = NewestCheckpoint(dir);
    if (!checkpoint.empty()) {
      args.push_back("--model");
      args.push_back("default=" + checkpoint);
    }
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = StartWithCheckpoints(args);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = Connect(**daemon);
    v1::ConfigureTrainingRequest config = EveryStepConfig(dir);
    ASSERT_TRUE(client->ConfigureTraining(config).ok());
    std::atomic<bool> stop{false};
    // The last step answered OK: its checkpoint was written before the answer.
    std::atomic<int64_t> acknowledged{0};
    std::atomic<bool> ended{false};
    std::thread trainer([&] {
      for (uint64_t seed = 1; !stop.load(); ++seed) {
        absl::StatusOr<v1::TrainStepResponse> step = client->TrainStep(StepRequest(32, seed));
        if (!step.ok()) break;
        EXPECT_EQ(step->checkpoint_error(), "");
        acknowledged = step->step();
      }
      ended = true;
    });
    // At least one step of this round first, however loaded the machine is.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (acknowledged.load() <= last_step && !ended.load() &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_GT(acknowledged.load(), last_step) << "round " << round << ": no step answered";
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    EXPECT_EQ((*daemon)->StopWith(SIGKILL), 128 + SIGKILL);
    stop = true;
    trainer.join();

    // The newest numbered checkpoint loads; older ones were removed only
    // after it was whole. At most keep (2) + the checkpoint this round's
    // daemon was loaded from (never removed while in use) + one written
    // just before the kill, ahead of its pruning: 4.
    const std::string newest = NewestCheckpoint(dir);
    ASSERT_FALSE(newest.empty()) << "round " << round;
    absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(newest);
    ASSERT_TRUE(loaded.ok()) << "round " << round << ": " << loaded.status();
    ASSERT_TRUE(loaded->has_step);
    EXPECT_GE(loaded->checkpoint.step, acknowledged.load()) << "round " << round;
    last_step = loaded->checkpoint.step;
    EXPECT_TRUE(LoadOnnxFile(newest, "default").ok());
    EXPECT_LE(NumberedCheckpoints(dir).size(), 4u) << "round " << round;
  }
  EXPECT_GT(last_step, 0) << "no checkpoint was ever written";
}

// Periodic checkpoints are numbered; the newest --keep-checkpoints stay.
// Each carries the training configuration, so a daemon restarted on one
// goes on checkpointing (and skipping) as configured, and can save at once.
// A skipped step is answered OK, changes nothing and is counted.
TEST(ModelTrainingE2eTest, CheckpointsAreNumberedKeptAndResumeTheConfiguration) {
  const std::string dir = TempPath("numbered");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        StartWithCheckpoints({"--devices", "cpu:0", "--keep-checkpoints", "2"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = Connect(**daemon);
    v1::ConfigureTrainingRequest config = EveryStepConfig(dir);
    config.mutable_config()->set_non_finite_steps(v1::NON_FINITE_STEPS_SKIP);
    ASSERT_TRUE(client->ConfigureTraining(config).ok());
    for (int step = 1; step <= 3; ++step) {
      absl::StatusOr<v1::TrainStepResponse> trained = client->TrainStep(StepRequest(4, step));
      ASSERT_TRUE(trained.ok()) << trained.status();
      EXPECT_EQ(trained->checkpoint_path(),
                absl::StrCat(dir, "/default-step00000000", step, ".onnx"));
      EXPECT_EQ(trained->checkpoint_error(), "");
    }
    EXPECT_EQ(NumberedCheckpoints(dir),
              (std::vector<std::string>{dir + "/default-step000000002.onnx",
                                        dir + "/default-step000000003.onnx"}));
    EXPECT_FALSE(std::filesystem::exists(dir + "/default-step000000001.onnx.state"));
    EXPECT_EQ(
        MetricValue(**daemon,
                    "replicad_train_checkpoints_total{model=\"default\",outcome=\"written\"}"),
        3);
    EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0", "--keep-checkpoints", "2", "--model",
                            "default=" + dir + "/default-step000000003.onnx"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  v1::SaveCheckpointRequest save;
  save.set_model("default");
  save.set_path("restarted.onnx");
  absl::StatusOr<v1::SaveCheckpointResponse> saved = client->SaveCheckpoint(save);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->step(), 3);
  // With the momentum buffers it resumed with, not an empty state.
  absl::StatusOr<LoadedCheckpoint> restarted = ReadCheckpoint(TempPath("restarted.onnx"));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_TRUE(restarted->state_matches);
  EXPECT_FALSE(restarted->checkpoint.optimizer_state.empty());
  // No ConfigureTraining: the checkpoint's configuration applies.
  absl::StatusOr<v1::TrainStepResponse> fourth = client->TrainStep(StepRequest(4, 4));
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(fourth->step(), 4);
  EXPECT_EQ(fourth->checkpoint_path(), dir + "/default-step000000004.onnx");
  v1::TrainStepRequest huge = StepRequest(4, 5);
  Tensor image = Tensor::Host(DType::kFloat32, {4, 1, 28, 28});
  for (int64_t i = 0; i < image.num_elements(); ++i) image.data<float>()[i] = 3e38f;
  *huge.mutable_inputs(0) = ToProto("image", image);
  absl::StatusOr<v1::TrainStepResponse> skipped = client->TrainStep(huge);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_THAT(skipped->skipped(), HasSubstr("not finite"));
  EXPECT_EQ(skipped->step(), 4);
  EXPECT_EQ(skipped->checkpoint_path(), "");
  EXPECT_EQ(NumberedCheckpoints(dir),
            (std::vector<std::string>{dir + "/default-step000000003.onnx",
                                      dir + "/default-step000000004.onnx"}));
  EXPECT_EQ(MetricValue(**daemon,
                        "replicad_train_steps_not_applied_total{model=\"default\","
                        "outcome=\"skipped\",code=\"OK\"}"),
            1);
  EXPECT_EQ(MetricValue(**daemon, "replicad_train_steps_total{model=\"default\"}"), 1);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
}

// A periodic checkpoint that cannot be written does not turn an applied
// step into an error (a client would retry it and train the batch twice):
// the step is answered OK with the failure beside it, and counted.
TEST(ModelTrainingE2eTest, AFailedPeriodicCheckpointAnswersTheAppliedStep) {
  const std::string dir = TempPath("vanishing");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  v1::ConfigureTrainingRequest config = EveryStepConfig(dir);
  ASSERT_TRUE(client->ConfigureTraining(config).ok());
  std::filesystem::remove_all(dir);
  std::ofstream(dir) << "not a directory";
  for (int step = 1; step <= 2; ++step) {
    absl::StatusOr<v1::TrainStepResponse> trained = client->TrainStep(StepRequest(4, step));
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_EQ(trained->step(), step);
    EXPECT_EQ(trained->checkpoint_path(), "");
    EXPECT_THAT(
        trained->checkpoint_error(),
        AllOf(HasSubstr(absl::StrCat("step ", step, " was applied, but its checkpoint failed")),
              HasSubstr(dir)));
  }
  v1::TrainStepRequest nan_pixel = StepRequest(4, 3);
  Tensor nan_image = testing::RandomTensor({4, 1, 28, 28}, 3);
  nan_image.data<float>()[0] = std::nanf("");
  *nan_pixel.mutable_inputs(0) = ToProto("image", nan_image);
  EXPECT_EQ(client->TrainStep(nan_pixel).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricValue(**daemon,
                        "replicad_train_checkpoints_total{model=\"default\",outcome=\"failed\"}"),
            2);
  EXPECT_EQ(MetricValue(**daemon, "replicad_train_steps_total{model=\"default\"}"), 2);
  EXPECT_EQ(MetricValue(**daemon,
                        "replicad_train_steps_not_applied_total{model=\"default\","
                        "outcome=\"refused\",code=\"INVALID_ARGUMENT\"}"),
            1);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
  // The operator learns it too, not only the client that looks.
  EXPECT_THAT((*daemon)->output(), HasSubstr("step 1 was applied, but its checkpoint failed"));
  std::filesystem::remove(dir);
}

// The reproduction: run/ held steps 24-28 of an earlier run; a
// fresh daemon writing steps 1-5 into it deleted one of them per step, the
// newest included. Rotation now removes only the run's own checkpoints, and
// a number another run wrote is refused, not overwritten.
TEST(ModelTrainingE2eTest, RotationNeverRemovesOrReplacesAnotherRunsCheckpoints) {
  const std::string dir = TempPath("run");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        StartWithCheckpoints({"--devices", "cpu:0", "--keep-checkpoints", "5"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = Connect(**daemon);
    ASSERT_TRUE(client->ConfigureTraining(EveryStepConfig(dir)).ok());
    for (int step = 1; step <= 3; ++step) ASSERT_TRUE(client->TrainStep(StepRequest(4, step)).ok());
    EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
  }
  // The earlier run's checkpoints become steps 24-26, as a longer run left them.
  for (int step = 1; step <= 3; ++step) {
    const std::string from = absl::StrCat(dir, "/default-step00000000", step, ".onnx");
    const std::string to = absl::StrCat(dir, "/default-step0000000", 23 + step, ".onnx");
    std::filesystem::rename(from, to);
    std::filesystem::rename(from + ".state", to + ".state");
  }
  const std::vector<std::string> earlier = NumberedCheckpoints(dir);
  ASSERT_EQ(earlier.size(), 3u);
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0", "--keep-checkpoints", "2"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  ASSERT_TRUE(client->ConfigureTraining(EveryStepConfig(dir)).ok());
  for (int step = 1; step <= 5; ++step) {
    absl::StatusOr<v1::TrainStepResponse> trained = client->TrainStep(StepRequest(4, step));
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_EQ(trained->checkpoint_error(), "");
  }
  std::vector<std::string> expected = {dir + "/default-step000000004.onnx",
                                       dir + "/default-step000000005.onnx"};
  expected.insert(expected.end(), earlier.begin(), earlier.end());
  EXPECT_EQ(NumberedCheckpoints(dir), expected);
  for (const std::string& path : earlier) {
    EXPECT_TRUE(std::filesystem::exists(path + ".state")) << path;
  }
  // No temporary file is left by any of the writes.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(absl::EndsWith(name, ".onnx") || absl::EndsWith(name, ".onnx.state")) << name;
  }
  // A step number the earlier run wrote: that file is kept, not replaced.
  const std::string foreign = dir + "/default-step000000006.onnx";
  std::filesystem::copy_file(earlier[0], foreign);
  const auto foreign_size = std::filesystem::file_size(foreign);
  absl::StatusOr<v1::TrainStepResponse> sixth = client->TrainStep(StepRequest(4, 6));
  ASSERT_TRUE(sixth.ok()) << sixth.status();
  EXPECT_EQ(sixth->checkpoint_path(), "");
  EXPECT_THAT(sixth->checkpoint_error(),
              AllOf(HasSubstr("step 6 was applied, but its checkpoint failed"),
                    HasSubstr("was not written by this run of training"), HasSubstr("it is kept")));
  EXPECT_EQ(std::filesystem::file_size(foreign), foreign_size);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
}

// Both target forms are accepted, and a client may switch between them:
// class labels, then probabilities, then labels, on one trainer's weights,
// optimizer state and step count (the first form used to stick).
TEST(ModelTrainingE2eTest, TargetsMaySwitchBetweenLabelsAndProbabilities) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start({"--devices", "cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  ASSERT_TRUE(client->ConfigureTraining(SgdConfig()).ok());
  ASSERT_TRUE(client->TrainStep(StepRequest(4, 1)).ok());
  v1::TrainStepRequest soft = StepRequest(4, 2);
  Tensor probabilities = Tensor::Host(DType::kFloat32, {4, 10});
  for (int64_t i = 0; i < 40; ++i) probabilities.data<float>()[i] = 0.1f;
  *soft.mutable_targets() = ToProto("targets", probabilities);
  absl::StatusOr<v1::TrainStepResponse> second = client->TrainStep(soft);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->step(), 2);
  absl::StatusOr<v1::TrainStepResponse> third = client->TrainStep(StepRequest(4, 3));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->step(), 3);
  // A malformed step in the other form is refused and loses nothing.
  v1::TrainStepRequest wrong = soft;
  *wrong.mutable_targets() = ToProto("targets", Tensor::Host(DType::kFloat32, {4, 7}));
  EXPECT_EQ(client->TrainStep(wrong).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<v1::TrainStepResponse> fourth = client->TrainStep(StepRequest(4, 4));
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(fourth->step(), 4);
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
}

// A file name the file system takes (up to 255 bytes) is a checkpoint name,
// although its state file's name would be longer: that one takes the hash
// form (core/train/checkpoint.h), and loading finds it.
TEST(ModelTrainingE2eTest, ALongLegalCheckpointNameIsWrittenAndResumes) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartWithCheckpoints({"--devices", "cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Connect(**daemon);
  ASSERT_TRUE(client->ConfigureTraining(SgdConfig()).ok());
  ASSERT_TRUE(client->TrainStep(StepRequest(4, 1)).ok());
  const std::string name = std::string(250, 'r') + ".onnx";
  ASSERT_EQ(name.size(), 255u);
  v1::SaveCheckpointRequest save;
  save.set_model("default");
  save.set_path(name);
  absl::StatusOr<v1::SaveCheckpointResponse> saved = client->SaveCheckpoint(save);
  ASSERT_TRUE(saved.ok()) << saved.status();
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(TempPath(name));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->state_matches);
  EXPECT_EQ(loaded->checkpoint.step, 1);
  save.set_path(std::string(256, 'r'));
  absl::StatusOr<v1::SaveCheckpointResponse> too_long = client->SaveCheckpoint(save);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(), HasSubstr("at most 255 bytes; received 256"));
  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0);
  std::filesystem::remove(TempPath(name));
  std::filesystem::remove(TempPath(CheckpointStateName(name)));
}

}  // namespace
}  // namespace replicad
