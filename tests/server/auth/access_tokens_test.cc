// Bearer tokens and roles: what each RPC needs, how the token file is read,
// and that it is read again when it changes.
#include "server/auth/access_tokens.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kInferToken = "infer-token-0123456789";
const std::string kTrainToken = "train-token-0123456789";
const std::string kAdminToken = "admin-token-0123456789";

std::string TokenFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Bearer(const std::string& token) { return "Bearer " + token; }

TEST(AccessPolicyTest, EachRpcNeedsItsRole) {
  EXPECT_EQ(RequiredRole("ServerLive"), std::nullopt);
  EXPECT_EQ(RequiredRole("ModelReady"), std::nullopt);
  EXPECT_EQ(RequiredRole("Predict"), Role::kInfer);
  EXPECT_EQ(RequiredRole("ModelInfer"), Role::kInfer);
  EXPECT_EQ(RequiredRole("TrainStep"), Role::kTrain);
  EXPECT_EQ(RequiredRole("SaveCheckpoint"), Role::kTrain);
  EXPECT_EQ(RequiredRole("RepositoryModelLoad"), Role::kAdmin);
  EXPECT_EQ(RequiredRole("SystemSharedMemoryRegister"), Role::kAdmin);
  EXPECT_EQ(RequiredRole("CudaSharedMemoryRegister"), Role::kAdmin);
  EXPECT_EQ(RequiredRole("CudaSharedMemoryUnregister"), Role::kAdmin);
  EXPECT_EQ(RequiredRole("CudaSharedMemoryStatus"), Role::kInfer);
  EXPECT_EQ(RequiredRole("Metrics"), Role::kMetrics);
  // Not listed: closed to all but admin.
  EXPECT_EQ(RequiredRole("SomethingNew"), Role::kAdmin);
}

TEST(AccessTokensTest, ChecksTokensAndRoles) {
  absl::StatusOr<std::unique_ptr<AccessTokens>> tokens = AccessTokens::Open(
      TokenFile("tokens_roles", "# team tokens\n\n" + kInferToken + " infer\n" + kTrainToken +
                                    "\tinfer,train\n" + kAdminToken + " admin,metrics\n"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const AccessTokens& t = **tokens;
  const std::string infer = Bearer(kInferToken), train = Bearer(kTrainToken);
  EXPECT_TRUE(t.Check(nullptr, "ServerReady").ok());
  absl::Status missing = t.Check(nullptr, "Predict");
  EXPECT_TRUE(absl::IsUnauthenticated(missing)) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("authorization: Bearer"));
  EXPECT_TRUE(t.Check(&infer, "Predict").ok());
  const std::string lower = "bearer " + kInferToken;
  EXPECT_TRUE(t.Check(&lower, "ModelInfer").ok());
  absl::Status denied = t.Check(&infer, "TrainStep");
  EXPECT_TRUE(absl::IsPermissionDenied(denied)) << denied;
  EXPECT_THAT(std::string(denied.message()),
              AllOf(HasSubstr("TrainStep"), HasSubstr("'train'"), Not(HasSubstr(kInferToken))));
  EXPECT_TRUE(t.Check(&train, "TrainStep").ok());
  EXPECT_TRUE(absl::IsPermissionDenied(t.Check(&train, "RepositoryModelLoad")));
  const std::string unknown = Bearer("not-a-token-0123456789");
  absl::Status refused = t.Check(&unknown, "Predict");
  EXPECT_TRUE(absl::IsUnauthenticated(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), Not(HasSubstr("not-a-token")));
  // A prefix or an extension of a real token is another token.
  const std::string prefix = Bearer(kInferToken.substr(0, kInferToken.size() - 1));
  const std::string longer = Bearer(kInferToken + "x");
  EXPECT_TRUE(absl::IsUnauthenticated(t.Check(&prefix, "Predict")));
  EXPECT_TRUE(absl::IsUnauthenticated(t.Check(&longer, "Predict")));
  const std::string basic = "Basic dXNlcjpwYXNz";
  EXPECT_TRUE(absl::IsUnauthenticated(t.Check(&basic, "Predict")));
}

TEST(AccessTokensTest, MalformedFilesAreRefusedNamingTheLineNotTheToken) {
  auto refusal = [](const std::string& name, const std::string& text) {
    absl::StatusOr<std::unique_ptr<AccessTokens>> tokens =
        AccessTokens::Open(TokenFile(name, text));
    EXPECT_FALSE(tokens.ok());
    return std::string(tokens.status().message());
  };
  EXPECT_THAT(
      refusal("bad_role", "# x\n" + kInferToken + " infer,root\n"),
      AllOf(HasSubstr("line 2"), HasSubstr("unknown role 'root'"), Not(HasSubstr(kInferToken))));
  EXPECT_THAT(refusal("short_token", "short infer\n"),
              AllOf(HasSubstr("line 1"), HasSubstr("16 to 4096"), Not(HasSubstr("short "))));
  EXPECT_THAT(refusal("no_roles", kInferToken + "\n"),
              AllOf(HasSubstr("expected '<token> <role>"), Not(HasSubstr(kInferToken))));
  EXPECT_THAT(refusal("empty", "# nothing\n"), HasSubstr("no tokens"));
  absl::StatusOr<std::unique_ptr<AccessTokens>> absent =
      AccessTokens::Open(::testing::TempDir() + "/no_such_tokens");
  EXPECT_TRUE(absl::IsNotFound(absent.status())) << absent.status();
}

TEST(AccessTokensTest, RotatedFilesAreReadAgainAndBadOnesKeepTheOldTokens) {
  const std::string path = TokenFile("tokens_rotate", kInferToken + " infer\n");
  absl::StatusOr<std::unique_ptr<AccessTokens>> tokens = AccessTokens::Open(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const std::string old_token = Bearer(kInferToken), new_token = Bearer(kTrainToken);
  EXPECT_TRUE((*tokens)->Check(&old_token, "Predict").ok());
  // Replaced as an operator would: a new file renamed over the old one.
  std::ofstream(path + ".new") << kTrainToken << " infer\n";
  std::filesystem::rename(path + ".new", path);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE(absl::IsUnauthenticated((*tokens)->Check(&old_token, "Predict")));
  EXPECT_TRUE((*tokens)->Check(&new_token, "Predict").ok());
  std::ofstream(path + ".new") << "garbage\n";
  std::filesystem::rename(path + ".new", path);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE((*tokens)->Check(&new_token, "Predict").ok());
}

}  // namespace
}  // namespace replicad
