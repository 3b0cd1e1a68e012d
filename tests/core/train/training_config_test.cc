// The training configuration in the core's terms (docs/training.md): its defaults are the API's;
// completing it fills the loss's output and refuses what cannot train, naming the field as the API
// spells it; its text (what checkpoints and rank commands carry) round-trips every field, strings
// with quotes, newlines and non-UTF-8 bytes included, and reads the protobuf text format that
// checkpoints written before it hold; malformed text is refused naming the line; the ranks'
// fingerprint ignores where checkpoints go.

#include "core/train/training_config.h"

#include <limits>

#include "core/model/default_model.h"
#include "core/model/onnx_import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

TrainingConfig EveryFieldSet() {
  TrainingConfig config;
  config.loss = TrainingConfig::Loss::kMeanSquaredError;
  config.output = "logits";
  config.optimizer.kind = OptimizerConfig::Kind::kAdam;
  config.optimizer.learning_rate = 0.001f;
  config.optimizer.momentum = 0.5f;
  config.optimizer.nesterov = true;
  config.optimizer.weight_decay = 1e-4f;
  config.optimizer.beta1 = 0.8f;
  config.optimizer.beta2 = 0.95f;
  config.optimizer.epsilon = 1e-6f;
  config.optimizer.alpha = 0.9f;
  config.reduction = TrainingConfig::Reduction::kParameterServer;
  config.ps_device = "cpu:0";
  config.sync_batch_norm = false;
  config.seed = 18446744073709551615ull;
  config.non_finite_steps = TrainerOptions::NonFiniteSteps::kSkip;
  config.checkpoint_every_steps = 7;
  config.checkpoint_dir = "runs/\"quoted\" name\n\xff\xfe";
  config.precision = ComputePrecision::kFloat16;
  config.loss_scaling.initial_scale = 1024;
  config.loss_scaling.growth_interval = 100;
  return config;
}

TEST(TrainingConfigTest, EveryFieldRoundTripsThroughItsText) {
  for (const TrainingConfig& config : {TrainingConfig(), EveryFieldSet()}) {
    const std::string text = FormatTrainingConfig(config);
    absl::StatusOr<TrainingConfig> back = ParseTrainingConfig(text);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
    EXPECT_EQ(FormatTrainingConfig(*back), text);
    EXPECT_EQ(back->checkpoint_dir, config.checkpoint_dir);
    EXPECT_EQ(back->seed, config.seed);
    EXPECT_EQ(back->optimizer.learning_rate, config.optimizer.learning_rate);
  }
  // Floats are written in their shortest exact decimal.
  EXPECT_THAT(FormatTrainingConfig(EveryFieldSet()), HasSubstr("learning_rate: 0.001\n"));
}

// As protobuf's TextFormat::PrintToString wrote replicad.v1.TrainingConfig
// into checkpoints before the plain struct: fields at their proto3 default
// left out, doubles, non-ASCII bytes as octal escapes.
TEST(TrainingConfigTest, CheckpointsWrittenFromTheProtoStillLoad) {
  const std::string old = R"(loss: LOSS_SOFTMAX_CROSS_ENTROPY
output: "logits"
optimizer {
  kind: OPTIMIZER_SGD
  learning_rate: 0.02
  momentum: 0.9
  weight_decay: 0
  beta1: 0.9
  beta2: 0.999
  epsilon: 1e-08
  alpha: 0.99
}
reduction: GRADIENT_REDUCTION_ALLREDUCE
sync_batch_norm: true
checkpoint_every_steps: 2
checkpoint_dir: "/tmp/r\303\251sum\303\251"
non_finite_steps: NON_FINITE_STEPS_REFUSE
)";
  absl::StatusOr<TrainingConfig> config = ParseTrainingConfig(old);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->loss, TrainingConfig::Loss::kSoftmaxCrossEntropy);
  EXPECT_EQ(config->output, "logits");
  EXPECT_EQ(config->optimizer.kind, OptimizerConfig::Kind::kSgd);
  EXPECT_EQ(config->optimizer.learning_rate, 0.02f);
  EXPECT_EQ(config->optimizer.momentum, 0.9f);
  EXPECT_EQ(config->optimizer.epsilon, 1e-8f);
  EXPECT_FALSE(config->optimizer.nesterov);
  EXPECT_EQ(config->reduction, TrainingConfig::Reduction::kAllReduce);
  EXPECT_TRUE(config->sync_batch_norm);
  EXPECT_EQ(config->seed, 0u);
  EXPECT_EQ(config->checkpoint_every_steps, 2);
  EXPECT_EQ(config->checkpoint_dir, "/tmp/r\xc3\xa9sum\xc3\xa9");
  EXPECT_EQ(config->non_finite_steps, TrainerOptions::NonFiniteSteps::kRefuse);
}

TEST(TrainingConfigTest, UnspecifiedAndUnknownFieldsKeepTheDefaults) {
  absl::StatusOr<TrainingConfig> config = ParseTrainingConfig(
      "# a comment\nloss: LOSS_UNSPECIFIED\noptimizer { kind: 0 future_knob: 3 }\n"
      "future_field: \"x\"\nfuture_message { a: 1 nested { b: \"}\" } }\nseed: 5\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(FormatTrainingConfig(*config), [] {
    TrainingConfig expected;
    expected.seed = 5;
    return FormatTrainingConfig(expected);
  }());
}

TEST(TrainingConfigTest, MalformedTextIsRefusedNamingTheLine) {
  struct Case {
    std::string text, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"loss: LOSS_HINGE\n", "line 1: expected a value of loss, not 'LOSS_HINGE'"},
           {"seed: 1\noptimizer {\n  kind: OPTIMIZER_SGD\n",
            "line 4: expected '}' closing optimizer"},
           {"output: \"open\n", "line 1: expected the string's closing quote"},
           {"seed: -1\n", "line 1: expected an integer"},
           {"optimizer { learning_rate: fast }", "line 1: expected a number"},
           {"sync_batch_norm: maybe", "line 1: expected true or false"},
           {"non_finite_steps: 9", "line 1: expected a value of non_finite_steps, not '9'"},
       }) {
    absl::StatusOr<TrainingConfig> config = ParseTrainingConfig(c.text);
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr(c.expected)) << c.text;
  }
}

class CompleteTrainingConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::shared_ptr<const Model>> model =
        LoadOnnxBytes(DefaultModelOnnxBytes(), "default", "<embedded>", OnnxImportOptions{});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
    devices_.push_back(DeviceInfo{DeviceId{DeviceKind::kCpu, 0}, "cpu", 1 << 30, "", "", ""});
  }
  absl::Status Error(TrainingConfig config) {
    return CompleteTrainingConfig(std::move(config), *model_, devices_).status();
  }
  std::shared_ptr<const Model> model_;
  std::vector<DeviceInfo> devices_;
};

TEST_F(CompleteTrainingConfigTest, FillsTheFirstOutputAndKeepsTheRest) {
  absl::StatusOr<TrainingConfig> done = CompleteTrainingConfig(TrainingConfig(), *model_, devices_);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->output, model_->outputs()[0].name);
  TrainingConfig ps = EveryFieldSet();
  ps.optimizer.nesterov = false;
  ps.checkpoint_dir = "runs";
  ASSERT_TRUE(CompleteTrainingConfig(ps, *model_, devices_).ok());
}

TEST_F(CompleteTrainingConfigTest, RefusesNamingTheField) {
  TrainingConfig config;
  config.output = "nope";
  EXPECT_THAT(Error(config).message(), HasSubstr("config.output: model 'default' has no output "
                                                 "'nope'; expected one of: logits"));
  config = TrainingConfig();
  config.reduction = TrainingConfig::Reduction::kParameterServer;
  EXPECT_THAT(Error(config).message(), HasSubstr("config.ps_device must name"));
  config.ps_device = "cuda:7";
  EXPECT_THAT(Error(config).message(),
              HasSubstr("config.ps_device: 'cuda:7' does not exist; available: cpu:0"));
  config.ps_device = "gpu!";
  EXPECT_THAT(Error(config).message(), HasSubstr("config.ps_device: "));
  config = TrainingConfig();
  config.ps_device = "cpu:0";
  EXPECT_THAT(Error(config).message(), HasSubstr("config.ps_device is only for reduction 'ps'"));
  config = TrainingConfig();
  config.checkpoint_every_steps = -1;
  EXPECT_THAT(Error(config).message(),
              HasSubstr("config.checkpoint_every_steps must be >= 0, received -1"));
  config.checkpoint_every_steps = 3;
  EXPECT_THAT(Error(config).message(), HasSubstr("config.checkpoint_dir must be set"));
  config = TrainingConfig();
  config.optimizer.learning_rate = -1;
  EXPECT_THAT(Error(config).message(),
              HasSubstr("config.optimizer.learning_rate must be > 0 and <= 10000; received -1"));
  EXPECT_EQ(Error(config).code(), absl::StatusCode::kInvalidArgument);
  config = TrainingConfig();
  config.loss_scaling.initial_scale = 0;
  EXPECT_THAT(Error(config).message(),
              HasSubstr("config.initial_loss_scale must be a finite number > 0, received 0"));
  config.loss_scaling.initial_scale = std::numeric_limits<float>::infinity();
  EXPECT_THAT(Error(config).message(), HasSubstr("config.initial_loss_scale must be"));
  config = TrainingConfig();
  config.loss_scaling.growth_interval = 0;
  EXPECT_THAT(Error(config).message(),
              HasSubstr("config.loss_scale_growth_interval must be >= 1, received 0"));
}

TEST(TrainingFingerprintTest, RanksCompareWhatTheyTrainWithNotWhereTheyWrite) {
  TrainingConfig a = EveryFieldSet();
  TrainingConfig b = a;
  b.checkpoint_dir = "elsewhere";
  b.checkpoint_every_steps = 0;
  EXPECT_EQ(TrainingFingerprint(a), TrainingFingerprint(b));
  b.optimizer.learning_rate = 0.002f;
  EXPECT_NE(TrainingFingerprint(a), TrainingFingerprint(b));
}

}  // namespace
}  // namespace replicad
