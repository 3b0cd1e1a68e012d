// The API's TrainingConfig and the core's (docs/training.md): unset fields take the documented
// defaults, enum numbers the API does not define are refused naming the field and the names it
// does, the applied configuration is answered with every field set and floats as written, and the
// core's checkpoint text is protobuf's text format both ways (what older daemons wrote loads, what
// this one writes parses as the message); a precision training does not know is refused naming
// the field, and tf32 crosses both ways.

#include "server/training_config_proto.h"

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

v1::TrainingConfig EveryFieldSet() {
  v1::TrainingConfig proto;
  proto.set_loss(v1::LOSS_MEAN_SQUARED_ERROR);
  proto.set_output("logits");
  v1::OptimizerConfig* o = proto.mutable_optimizer();
  o->set_kind(v1::OPTIMIZER_RMSPROP);
  o->set_learning_rate(0.01);
  o->set_momentum(0.9);
  o->set_nesterov(false);
  o->set_weight_decay(0.0005);
  o->set_beta1(0.85);
  o->set_beta2(0.995);
  o->set_epsilon(1e-7);
  o->set_alpha(0.95);
  proto.set_reduction(v1::GRADIENT_REDUCTION_PS);
  proto.set_ps_device("cpu:1");
  proto.set_sync_batch_norm(false);
  proto.set_seed(1234567890123ull);
  proto.set_checkpoint_every_steps(10);
  proto.set_checkpoint_dir("runs/r\xc3\xa9sum\xc3\xa9 \"x\"");
  proto.set_non_finite_steps(v1::NON_FINITE_STEPS_SKIP);
  proto.set_precision("fp16");
  proto.set_initial_loss_scale(1024);
  proto.set_loss_scale_growth_interval(50);
  return proto;
}

TEST(TrainingConfigProtoTest, EveryFieldCrossesBothWays) {
  const v1::TrainingConfig proto = EveryFieldSet();
  absl::StatusOr<TrainingConfig> config = TrainingConfigFromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.learning_rate, 0.01f);
  EXPECT_EQ(config->seed, 1234567890123ull);
  // Answered as written: 0.01, not the float's 0.009999999776.
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(TrainingConfigToProto(*config), proto))
      << TrainingConfigToProto(*config).DebugString();
}

TEST(TrainingConfigProtoTest, UnsetFieldsTakeTheDocumentedDefaults) {
  absl::StatusOr<TrainingConfig> config = TrainingConfigFromProto(v1::TrainingConfig());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(FormatTrainingConfig(*config), FormatTrainingConfig(TrainingConfig()));
  const v1::TrainingConfig applied = TrainingConfigToProto(*config);
  EXPECT_EQ(applied.loss(), v1::LOSS_SOFTMAX_CROSS_ENTROPY);
  EXPECT_EQ(applied.precision(), "fp32");
  EXPECT_EQ(applied.optimizer().kind(), v1::OPTIMIZER_SGD);
  EXPECT_EQ(applied.optimizer().learning_rate(), 0.01);
  EXPECT_EQ(applied.optimizer().beta2(), 0.999);
  EXPECT_EQ(applied.optimizer().epsilon(), 1e-8);
  EXPECT_TRUE(applied.sync_batch_norm());
  EXPECT_EQ(applied.reduction(), v1::GRADIENT_REDUCTION_ALLREDUCE);
  EXPECT_EQ(applied.non_finite_steps(), v1::NON_FINITE_STEPS_REFUSE);
}

TEST(TrainingConfigProtoTest, UndefinedEnumNumbersAreRefusedNamingTheField) {
  v1::TrainingConfig proto;
  proto.mutable_optimizer()->set_kind(static_cast<v1::OptimizerKind>(99));
  absl::Status status = TrainingConfigFromProto(proto).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("config.optimizer.kind: expected one of "
                                          "OPTIMIZER_UNSPECIFIED, OPTIMIZER_SGD, OPTIMIZER_ADAM, "
                                          "OPTIMIZER_RMSPROP; received 99"));
  proto = v1::TrainingConfig();
  proto.set_loss(static_cast<v1::Loss>(-3));
  EXPECT_THAT(TrainingConfigFromProto(proto).status().message(),
              HasSubstr("config.loss: expected one of"));
  proto = v1::TrainingConfig();
  proto.set_reduction(static_cast<v1::GradientReduction>(7));
  EXPECT_THAT(TrainingConfigFromProto(proto).status().message(),
              HasSubstr("config.reduction: expected one of"));
  proto = v1::TrainingConfig();
  proto.set_non_finite_steps(static_cast<v1::NonFiniteSteps>(3));
  EXPECT_THAT(TrainingConfigFromProto(proto).status().message(),
              HasSubstr("config.non_finite_steps: expected one of"));
}

TEST(TrainingConfigProtoTest, PrecisionsTrainingDoesNotKnowAreRefusedNamingTheField) {
  v1::TrainingConfig proto;
  proto.set_precision("half");
  EXPECT_EQ(TrainingConfigFromProto(proto).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(TrainingConfigFromProto(proto).status().message(),
              HasSubstr("config.precision: expected fp32, bf16, fp16 or tf32, received 'half'"));
  proto.set_precision("tf32");
  absl::StatusOr<TrainingConfig> tf32 = TrainingConfigFromProto(proto);
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  EXPECT_EQ(tf32->precision, ComputePrecision::kTensorFloat32);
  // In a checkpoint's text, a precision this build does not train in is malformed text.
  EXPECT_EQ(ParseTrainingConfig("precision: \"half\"").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTrainingConfig("precision: \"fp16\"")->precision, ComputePrecision::kFloat16);
  EXPECT_EQ(ParseTrainingConfig("precision: \"tf32\"")->precision,
            ComputePrecision::kTensorFloat32);
}

TEST(TrainingConfigProtoTest, TheCheckpointTextIsProtobufTextFormatBothWays) {
  const v1::TrainingConfig proto = EveryFieldSet();
  // What a checkpoint written by an older daemon holds.
  std::string printed;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(proto, &printed));
  absl::StatusOr<TrainingConfig> read = ParseTrainingConfig(printed);
  ASSERT_TRUE(read.ok()) << read.status() << "\n" << printed;
  EXPECT_EQ(FormatTrainingConfig(*read), FormatTrainingConfig(*TrainingConfigFromProto(proto)));
  // What this one writes, read as the message.
  v1::TrainingConfig parsed;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(FormatTrainingConfig(*read), &parsed));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, proto))
      << parsed.DebugString();
}

}  // namespace
}  // namespace replicad
