// Numbered periodic checkpoints: the newest --keep-checkpoints stay.
#include "server/checkpoint_rotation.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace replicad {
namespace {

class CheckpointRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/checkpoint_rotation_test";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void Touch(const std::string& name) { std::ofstream(dir_ + "/" + name) << "x"; }
  std::set<std::string> Files() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }
  std::string dir_;
};

TEST_F(CheckpointRotationTest, PathIsNumberedSoListingsSortByStep) {
  EXPECT_EQ(NumberedCheckpointPath("/r/run", "mnist", 1200), "/r/run/mnist-step000001200.onnx");
  EXPECT_LT(NumberedCheckpointPath("d", "m", 99), NumberedCheckpointPath("d", "m", 100));
}

TEST_F(CheckpointRotationTest, KeepsTheNewestByStepWithTheirStateFiles) {
  for (int step : {5, 40, 300, 1000}) {
    Touch(NumberedCheckpointPath("", "m", step).substr(1));
    Touch(NumberedCheckpointPath("", "m", step).substr(1) + ".state");
  }
  ASSERT_TRUE(PruneNumberedCheckpoints(dir_, "m", 2).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"m-step000000300.onnx", "m-step000000300.onnx.state",
                                            "m-step000001000.onnx", "m-step000001000.onnx.state"}));
}

TEST_F(CheckpointRotationTest, LeavesOtherFilesModelsAndLinksAlone) {
  Touch("m-step000000001.onnx");
  Touch("m-step000000002.onnx");
  Touch("m.onnx");                    // Named by a client.
  Touch("m-stepX.onnx");              // Not a number.
  Touch("m-step000000001.onnx.tmp");  // A crashed write's leftover: not ours to judge.
  Touch("other-step000000001.onnx");  // Another model.
  Touch("mm-step000000001.onnx");     // A model whose name extends this one's.
  ASSERT_EQ(::symlink("/etc/hostname", (dir_ + "/m-step000000000.onnx").c_str()), 0);
  ASSERT_TRUE(PruneNumberedCheckpoints(dir_, "m", 1).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"m-step000000002.onnx", "m.onnx", "m-stepX.onnx",
                                            "m-step000000001.onnx.tmp", "other-step000000001.onnx",
                                            "mm-step000000001.onnx", "m-step000000000.onnx"}));
}

// A model restarted from an older checkpoint writes lower steps than the
// files already there: what was written last stays, and so do the spared
// files (the one just written, the one the model was loaded from).
TEST_F(CheckpointRotationTest, KeepsWhatWasWrittenLastAndSparesTheNamedFiles) {
  for (int step : {300, 400, 500}) Touch(NumberedCheckpointPath("", "m", step).substr(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Touch("m-step000000051.onnx");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Touch("m-step000000052.onnx");
  ASSERT_TRUE(PruneNumberedCheckpoints(dir_, "m", 2, {dir_ + "/./m-step000000300.onnx"}).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"m-step000000051.onnx", "m-step000000052.onnx",
                                            "m-step000000300.onnx"}));
}

TEST_F(CheckpointRotationTest, AModelNameWithASlashStaysInTheDirectory) {
  EXPECT_EQ(NumberedCheckpointPath("/r", "team/m", 7), "/r/team_m-step000000007.onnx");
  Touch("team_m-step000000001.onnx");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Touch("team_m-step000000002.onnx");
  ASSERT_TRUE(PruneNumberedCheckpoints(dir_, "team/m", 1).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"team_m-step000000002.onnx"}));
}

TEST_F(CheckpointRotationTest, KeepBelowOneKeepsOne) {
  Touch("m-step000000001.onnx");
  Touch("m-step000000002.onnx");
  ASSERT_TRUE(PruneNumberedCheckpoints(dir_, "m", 0).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"m-step000000002.onnx"}));
}

TEST_F(CheckpointRotationTest, MissingDirectoryIsNotFound) {
  absl::Status status = PruneNumberedCheckpoints(dir_ + "/absent", "m", 1);
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_NE(status.message().find("absent"), std::string::npos) << status;
}

}  // namespace
}  // namespace replicad
