// ModelUploads (server/model_upload.h), the upload root, as a hostile client
// would try it: names and paths that would leave the model's directory, a
// link planted in the root, too many bytes, a configuration that is not
// one; each refused by name with nothing written. And the swap: a new
// upload replaces the model's files, Keep drops the previous ones, Revert
// puts them back.

#include "server/model_upload.h"

#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

namespace fs = std::filesystem;

class ModelUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("replicad_upload_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    absl::StatusOr<std::unique_ptr<ModelUploads>> uploads =
        ModelUploads::Open(root_.string(), kLimit);
    ASSERT_TRUE(uploads.ok()) << uploads.status();
    uploads_ = *std::move(uploads);
  }
  void TearDown() override { fs::remove_all(root_); }

  // The files view their bytes, as they view a request's: the fixture keeps them.
  ModelUpload Upload(const std::string& model, std::vector<std::string> paths,
                     std::string bytes = "onnx bytes") {
    const std::string& kept = kept_bytes_.emplace_back(std::move(bytes));
    ModelUpload upload;
    upload.model = model;
    for (const std::string& path : paths) upload.files.push_back({path, kept, "file:" + path});
    return upload;
  }

  // Every path under the root, relative to it.
  std::set<std::string> Tree() const {
    std::set<std::string> paths;
    for (const auto& entry : fs::recursive_directory_iterator(root_)) {
      paths.insert(fs::relative(entry.path(), root_).string());
    }
    return paths;
  }

  std::string Read(const std::string& path) const {
    std::ifstream in(root_ / path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  static constexpr uint64_t kLimit = 1000;
  std::deque<std::string> kept_bytes_;  // A deque: its strings never move.
  fs::path root_;
  std::unique_ptr<ModelUploads> uploads_;
};

TEST_F(ModelUploadTest, TheRootIsMadeWithItsParents) {
  const fs::path nested = root_ / "a" / "b";
  absl::StatusOr<std::unique_ptr<ModelUploads>> uploads = ModelUploads::Open(nested.string(), 10);
  ASSERT_TRUE(uploads.ok()) << uploads.status();
  EXPECT_TRUE(fs::is_directory(nested));
  std::ofstream(root_ / "file") << "x";
  EXPECT_EQ(ModelUploads::Open((root_ / "file").string(), 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelUploadTest, WritesTheModelsDirectoryAndItsConfiguration) {
  ModelUpload upload = Upload("m", {"1/model.onnx", "2/model.onnx"});
  upload.config_json = R"({"max_batch_size": 8, "input": [{"name": "x"}]})";
  ASSERT_TRUE(uploads_->Stage(upload).ok());
  uploads_->Keep("m");
  EXPECT_EQ(Tree(), (std::set<std::string>{"m", "m/1", "m/1/model.onnx", "m/2", "m/2/model.onnx",
                                           "m/config.pbtxt"}));
  EXPECT_EQ(Read("m/1/model.onnx"), "onnx bytes");
  const std::string config = Read("m/config.pbtxt");
  EXPECT_NE(config.find("name: \"m\""), std::string::npos) << config;
  EXPECT_NE(config.find("max_batch_size: 8"), std::string::npos) << config;
}

TEST_F(ModelUploadTest, ANewUploadReplacesTheFilesAndRevertPutsThemBack) {
  ASSERT_TRUE(uploads_->Stage(Upload("m", {"1/model.onnx"}, "first")).ok());
  uploads_->Keep("m");
  ASSERT_TRUE(uploads_->Stage(Upload("m", {"2/model.onnx"}, "second")).ok());
  EXPECT_EQ(Read("m/2/model.onnx"), "second");
  // A second upload of the model while the first loads is refused.
  absl::Status busy = uploads_->Stage(Upload("m", {"3/model.onnx"}));
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition) << busy;
  uploads_->Revert("m");  // Its load failed.
  EXPECT_EQ(Tree(), (std::set<std::string>{"m", "m/1", "m/1/model.onnx"}));
  EXPECT_EQ(Read("m/1/model.onnx"), "first");

  ASSERT_TRUE(uploads_->Stage(Upload("m", {"2/model.onnx"}, "second")).ok());
  uploads_->Keep("m");
  EXPECT_EQ(Tree(), (std::set<std::string>{"m", "m/2", "m/2/model.onnx"}));
  // A model that had no files before: Revert leaves none.
  ASSERT_TRUE(uploads_->Stage(Upload("n", {"1/model.onnx"})).ok());
  uploads_->Revert("n");
  EXPECT_EQ(Tree(), (std::set<std::string>{"m", "m/2", "m/2/model.onnx"}));
}

TEST_F(ModelUploadTest, RemoveForgetsAnUploadOnlyWhenNoneIsLoading) {
  ASSERT_TRUE(uploads_->Stage(Upload("m", {"1/model.onnx"})).ok());
  EXPECT_EQ(uploads_->Remove("m").code(), absl::StatusCode::kFailedPrecondition);
  uploads_->Keep("m");
  EXPECT_TRUE(uploads_->Remove("m").ok());
  EXPECT_TRUE(Tree().empty());
  EXPECT_EQ(uploads_->Remove("m").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(uploads_->Remove("..").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelUploadTest, NamesAndPathsThatLeaveTheDirectoryAreRefused) {
  const std::string plain = "a plain name (no '/', not starting with '.', at most 255 bytes)";
  for (const std::string& model :
       {std::string(), std::string("."), std::string(".."), std::string("a/b"),
        std::string(".hidden"), std::string("a\nb"), std::string(256, 'm')}) {
    absl::Status s = uploads_->Stage(Upload(model, {"1/model.onnx"}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << model;
    EXPECT_NE(s.message().find("model: expected " + plain), std::string::npos) << s;
  }
  for (const std::string path :
       {"../x/model.onnx", "/etc/model.onnx", "1/../model.onnx", "0/model.onnx", "01/model.onnx",
        "-1/model.onnx", "1/2/model.onnx", "1/.model.onnx", "1/", "model.onnx", "1//model.onnx",
        "99999999999999999999/model.onnx"}) {
    absl::Status s = uploads_->Stage(Upload("m", {"1/model.onnx", path}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_EQ(s.message(),
              "file:" + path +
                  ": expected VERSION/FILE (VERSION a positive integer, FILE a plain file name, "
                  "e.g. 1/model.onnx), received '" +
                  path + "'");
  }
  absl::Status none = uploads_->Stage(Upload("m", {"1/weights.bin"}));
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("expected a file VERSION/model.onnx"), std::string::npos) << none;
  ModelUpload config_only = Upload("m", {});
  config_only.config_json = R"({"max_batch_size": 8})";
  absl::Status override_config = uploads_->Stage(config_only);
  EXPECT_EQ(override_config.code(), absl::StatusCode::kUnimplemented) << override_config;
  absl::Status twice = uploads_->Stage(Upload("m", {"1/model.onnx", "1/model.onnx"}));
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument) << twice;
  EXPECT_TRUE(Tree().empty());
}

TEST_F(ModelUploadTest, TooManyBytesAndBadConfigurationsWriteNothing) {
  absl::Status big = uploads_->Stage(Upload("m", {"1/model.onnx"}, std::string(kLimit + 1, 'x')));
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(big.message(), "model 'm': 1001 bytes uploaded, more than --max-upload-bytes 1000");
  ModelUpload unknown = Upload("m", {"1/model.onnx"});
  unknown.config_json = R"({"max_batch_size": 8, "no_such_field": 1})";
  absl::Status s = uploads_->Stage(unknown);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parameters.config: not a model configuration"), std::string::npos)
      << s;
  ModelUpload other = Upload("m", {"1/model.onnx"});
  other.config_json = R"({"name": "other"})";
  s = uploads_->Stage(other);
  EXPECT_EQ(s.message(),
            "parameters.config.name: expected the model's name 'm' or none, received 'other'");
  ModelUpload not_json = Upload("m", {"1/model.onnx"});
  not_json.config_json = "{";
  EXPECT_EQ(uploads_->Stage(not_json).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Tree().empty());
}

// A link planted at the model's name (say by someone with access to the
// root) is moved aside as a link, never followed: what it points at stays
// as it was, and the model's directory is a real one.
TEST_F(ModelUploadTest, ALinkInTheRootIsNeverFollowed) {
  const fs::path outside = root_.string() + "_outside";
  fs::remove_all(outside);
  fs::create_directories(outside / "1");
  std::ofstream(outside / "1" / "model.onnx") << "theirs";
  fs::create_directory_symlink(outside, root_ / "m");
  ASSERT_TRUE(uploads_->Stage(Upload("m", {"1/model.onnx"}, "ours")).ok());
  uploads_->Keep("m");
  EXPECT_FALSE(fs::is_symlink(root_ / "m"));
  EXPECT_EQ(Read("m/1/model.onnx"), "ours");
  std::ifstream theirs(outside / "1" / "model.onnx");
  std::string text;
  theirs >> text;
  EXPECT_EQ(text, "theirs");
  fs::remove_all(outside);
}

}  // namespace
}  // namespace replicad
