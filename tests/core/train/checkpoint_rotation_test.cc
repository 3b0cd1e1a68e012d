// Numbered periodic checkpoints: the newest --keep-checkpoints of a run
// stay, and nothing of another run is ever removed.
#include "core/train/checkpoint_rotation.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/train/checkpoint.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace replicad {
namespace {

class CheckpointRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/checkpoint_rotation_test";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void SetUpDirectory() {
    absl::StatusOr<CheckpointDirectory> opened = CheckpointDirectory::Open(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    directory_ = *std::move(opened);
  }
  // A checkpoint-like ONNX file that `run` wrote ("" records none): a graph
  // first, then metadata_props, as protobuf serializes a ModelProto.
  void Touch(const std::string& name, const std::string& run = "run-a") {
    onnx::ModelProto model;
    model.set_ir_version(8);
    onnx::TensorProto* weight = model.mutable_graph()->add_initializer();
    weight->set_name("w");
    weight->set_data_type(onnx::TensorProto::FLOAT);
    weight->add_dims(1000);
    weight->mutable_raw_data()->assign(4000, '\1');
    if (!run.empty()) {
      onnx::StringStringEntryProto* entry = model.add_metadata_props();
      entry->set_key("replicad.run_id");
      entry->set_value(run);
    }
    std::ofstream(dir_ + "/" + name) << model.SerializeAsString();
  }
  absl::Status Prune(const std::string& model, int keep,
                     const std::vector<std::string>& spare = {}) {
    if (!directory_) SetUpDirectory();
    return PruneNumberedCheckpoints(*directory_, model, keep, "run-a", spare);
  }
  std::set<std::string> Files() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }
  std::string dir_;
  std::optional<CheckpointDirectory> directory_;
};

TEST_F(CheckpointRotationTest, PathIsNumberedSoListingsSortByStep) {
  EXPECT_EQ(NumberedCheckpointPath("/r/run", "mnist", 1200), "/r/run/mnist-step000001200.onnx");
  EXPECT_LT(NumberedCheckpointPath("d", "m", 99), NumberedCheckpointPath("d", "m", 100));
}

TEST_F(CheckpointRotationTest, KeepsTheNewestByStepWithTheirStateFiles) {
  for (int step : {5, 40, 300, 1000}) {
    Touch(NumberedCheckpointPath("", "m", step).substr(1));
    Touch(NumberedCheckpointPath("", "m", step).substr(1) + ".state", "");
  }
  ASSERT_TRUE(Prune("m", 2).ok());
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
  ASSERT_TRUE(Prune("m", 1).ok());
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
  ASSERT_TRUE(Prune("m", 2, {dir_ + "/./m-step000000300.onnx"}).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"m-step000000051.onnx", "m-step000000052.onnx",
                                            "m-step000000300.onnx"}));
}

TEST_F(CheckpointRotationTest, AModelNameWithASlashStaysInTheDirectory) {
  EXPECT_EQ(NumberedCheckpointPath("/r", "team/m", 7), "/r/team_m-step000000007.onnx");
  Touch("team_m-step000000001.onnx");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Touch("team_m-step000000002.onnx");
  ASSERT_TRUE(Prune("team/m", 1).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"team_m-step000000002.onnx"}));
}

TEST_F(CheckpointRotationTest, KeepBelowOneKeepsOne) {
  Touch("m-step000000001.onnx");
  Touch("m-step000000002.onnx");
  ASSERT_TRUE(Prune("m", 0).ok());
  EXPECT_EQ(Files(), (std::set<std::string>{"m-step000000002.onnx"}));
}

// The reproduction: run/ held steps 24-28 of an earlier run, and a
// fresh run writing steps 1-5 with --keep-checkpoints 5 deleted them, the
// newest included. Another run's files, and files that record no run (or
// cannot be read as ONNX), are never this run's to remove.
TEST_F(CheckpointRotationTest, AnotherRunsCheckpointsAreNeverRemoved) {
  for (int step = 24; step <= 28; ++step) {
    Touch(NumberedCheckpointName("m", step), "run-earlier");
    Touch(NumberedCheckpointName("m", step) + ".state", "run-earlier");
  }
  Touch(NumberedCheckpointName("m", 29), "");  // Written before runs were recorded.
  std::ofstream(dir_ + "/" + NumberedCheckpointName("m", 30)) << "\xff\xff not onnx";
  std::set<std::string> before = Files();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int step = 1; step <= 7; ++step) {
    Touch(NumberedCheckpointName("m", step));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(Prune("m", 5).ok());
  }
  std::set<std::string> expected = before;
  for (int step = 3; step <= 7; ++step) expected.insert(NumberedCheckpointName("m", step));
  EXPECT_EQ(Files(), expected);
  // Another run id sees only its own.
  ASSERT_TRUE(PruneNumberedCheckpoints(*directory_, "m", 1, "run-earlier").ok());
  EXPECT_EQ(Files().count(NumberedCheckpointName("m", 27)), 0u);
  EXPECT_EQ(Files().count(NumberedCheckpointName("m", 27) + ".state"), 0u);
  EXPECT_EQ(Files().count(NumberedCheckpointName("m", 28)), 1u);
  EXPECT_EQ(Files().count(NumberedCheckpointName("m", 7)), 1u);
  // No run id: nothing can be proven ours, so nothing goes.
  const std::set<std::string> now = Files();
  ASSERT_TRUE(PruneNumberedCheckpoints(*directory_, "m", 1, "").ok());
  EXPECT_EQ(Files(), now);
}

// A run's state file whose name would exceed NAME_MAX is named by the hash
// form, and rotation removes it with its ONNX file.
TEST_F(CheckpointRotationTest, LongModelNamesLoseTheirStateFilesToo) {
  const std::string model(233, 'm');  // Names of 252 bytes.
  for (int step : {1, 2}) {
    const std::string name = NumberedCheckpointName(model, step);
    ASSERT_GT(name.size() + 6, 255u);
    Touch(name);
    Touch(CheckpointStateName(name));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(Prune(model, 1).ok());
  EXPECT_EQ(Files(),
            (std::set<std::string>{NumberedCheckpointName(model, 2),
                                   CheckpointStateName(NumberedCheckpointName(model, 2))}));
}

}  // namespace
}  // namespace replicad
