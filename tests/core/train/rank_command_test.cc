// The commands rank 0 sends the other ranks of a training job (docs/distributed-training.md): a
// step's tensors and a training configuration round-trip bit for bit; a cut or corrupted frame is
// refused naming what is wrong, never read past its end, and a tensor's bytes must match its shape.

#include "core/train/rank_command.h"

#include <cstring>

#include "core/train/byte_frame.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(RankCommandTest, AStepRoundTripsItsTensorsBitForBit) {
  RankCommand step{RankCommand::Kind::kStep, "default", {}, {}, Tensor::Host(DType::kInt64, {3})};
  Tensor images = Tensor::Host(DType::kFloat32, {3, 2});
  for (int i = 0; i < 6; ++i) images.data<float>()[i] = 0.5f * i - 1;
  for (int i = 0; i < 3; ++i) step.targets.data<int64_t>()[i] = i;
  step.inputs.push_back(images);
  step.first_row = 5;
  step.batch = 8;
  step.configuration = 0xfedcba9876543210ull;
  absl::StatusOr<RankCommand> back = DecodeRankCommand(EncodeRankCommand(step));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, RankCommand::Kind::kStep);
  EXPECT_EQ(back->model, "default");
  EXPECT_EQ(back->first_row, 5);
  EXPECT_EQ(back->batch, 8);
  EXPECT_EQ(back->configuration, 0xfedcba9876543210ull);
  ASSERT_EQ(back->inputs.size(), 1u);
  EXPECT_EQ(back->inputs[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(std::memcmp(back->inputs[0].raw_data(), images.raw_data(), images.byte_size()), 0);
  EXPECT_EQ(back->targets.dtype(), DType::kInt64);
  EXPECT_EQ(back->targets.data<int64_t>()[2], 2);
}

TEST(RankCommandTest, AConfigurationRoundTrips) {
  RankCommand configure;
  configure.kind = RankCommand::Kind::kConfigure;
  configure.model = "m";
  configure.config.seed = 42;
  configure.config.optimizer.learning_rate = 0.25f;
  configure.config.checkpoint_dir = "runs/\"quoted\"\n\xff";
  absl::StatusOr<RankCommand> back = DecodeRankCommand(EncodeRankCommand(configure));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatTrainingConfig(back->config), FormatTrainingConfig(configure.config));
  EXPECT_EQ(back->config.checkpoint_dir, configure.config.checkpoint_dir);
}

// A cut or corrupted frame is refused naming what is wrong, never read past
// its end, and a tensor's bytes must match its shape.
TEST(RankCommandTest, CutOrCorruptFramesAreRefused) {
  RankCommand step{RankCommand::Kind::kStep, "default", {}, {}, Tensor::Host(DType::kInt64, {2})};
  step.inputs.push_back(Tensor::Host(DType::kFloat32, {2, 4}));
  const std::string whole = EncodeRankCommand(step);
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    EXPECT_FALSE(DecodeRankCommand(whole.substr(0, cut)).ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(DecodeRankCommand(whole + "x").ok());
  // Rows that cannot be part of the batch.
  step.first_row = 3;
  step.batch = 2;
  absl::StatusOr<RankCommand> outside = DecodeRankCommand(EncodeRankCommand(step));
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("rows from row 3 of a batch of 2"), std::string::npos)
      << outside.status();
  FrameWriter lying;
  lying.Int64(static_cast<int64_t>(DType::kFloat32));
  lying.Int64(1);
  lying.Int64(1000);     // 4000 bytes promised...
  lying.String("abcd");  // ...4 given.
  FrameReader reader(lying.bytes());
  absl::StatusOr<Tensor> tensor = reader.HostTensor("input");
  ASSERT_FALSE(tensor.ok());
  EXPECT_NE(tensor.status().message().find("4 bytes for shape [1000]"), std::string::npos)
      << tensor.status();
}

}  // namespace
}  // namespace replicad
