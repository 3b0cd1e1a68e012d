// Where clients may have checkpoints written: under --checkpoint-root only.
#include "server/checkpoint_root.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

class CheckpointRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/checkpoint_root_test";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/root/runs");
    std::filesystem::create_directories(dir_ + "/elsewhere");
    root_ = std::filesystem::canonical(dir_ + "/root").string();
    absl::StatusOr<CheckpointRoot> opened = CheckpointRoot::Open(dir_ + "/root/");
    ASSERT_TRUE(opened.ok()) << opened.status();
    checkpoints_ = *opened;
  }
  absl::Status Refusal(const std::string& path) {
    return checkpoints_.Resolve(path, "path").status();
  }
  std::string dir_, root_;
  CheckpointRoot checkpoints_;
};

TEST_F(CheckpointRootTest, PathsResolveUnderTheRoot) {
  EXPECT_EQ(checkpoints_.root(), root_);
  EXPECT_EQ(*checkpoints_.Resolve("m.onnx", "path"), root_ + "/m.onnx");
  EXPECT_EQ(*checkpoints_.Resolve("runs/./a/../m.onnx", "path"), root_ + "/runs/m.onnx");
  EXPECT_EQ(*checkpoints_.Resolve(root_ + "/runs/m.onnx", "path"), root_ + "/runs/m.onnx");
  EXPECT_EQ(*checkpoints_.Resolve("new/dir/m.onnx", "path"), root_ + "/new/dir/m.onnx");
}

TEST_F(CheckpointRootTest, EscapesAreRefusedNamingThePath) {
  for (const std::string& path :
       {std::string("../elsewhere/m.onnx"), std::string("runs/../../x.onnx"),
        std::string("/tmp/pwned_by_client.onnx"), std::string("/etc/passwd-test"),
        root_ + "/../elsewhere/m.onnx", root_ + "x/m.onnx"}) {
    absl::Status status = Refusal(path);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(status.message(), HasSubstr("path: '")) << path;
  }
  absl::Status status = Refusal(std::string("m.onnx\0.evil", 12));
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("NUL or control character (byte 0)"));
  EXPECT_EQ(Refusal("a\nb.onnx").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Refusal("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Refusal("runs/").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Refusal(".").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointRootTest, SymbolicLinksBelowTheRootAreRefused) {
  ASSERT_EQ(::symlink((dir_ + "/elsewhere").c_str(), (root_ + "/out").c_str()), 0);
  ASSERT_EQ(::symlink((dir_ + "/elsewhere/f").c_str(), (root_ + "/link.onnx").c_str()), 0);
  for (const std::string& path : {"out/m.onnx", "link.onnx"}) {
    absl::Status status = Refusal(path);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(status.message(), HasSubstr("passes through the symbolic link")) << path;
  }
}

TEST_F(CheckpointRootTest, WithoutARootNothingIsWritten) {
  CheckpointRoot off;
  absl::StatusOr<std::string> resolved = off.Resolve("m.onnx", "path");
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resolved.status().message(), HasSubstr("--checkpoint-root DIR"));
  EXPECT_EQ(CheckpointRoot::Open(dir_ + "/missing").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace replicad
