// The daemon's log (core/base/log.h): text lines as before, JSON lines a collector can parse
// whatever a client named its model (quotes, control characters, bytes that are not UTF-8),
// verbose lines only at their level, and the --log-format parser's message.
#include "core/base/log.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace replicad {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class LogTest : public ::testing::Test {
 protected:
  ~LogTest() override { ConfigureLog(LogFormat::kText, 0); }
};

TEST_F(LogTest, TextLinesGoToStdoutAndWarningsAndErrorsToStderr) {
  ConfigureLog(LogFormat::kText, 0);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  LogInfo("ready: 1 model version(s)");
  LogWarning("the TLS files changed");
  LogError("INVALID_ARGUMENT: --listen");
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "replicad: ready: 1 model version(s)\n");
  EXPECT_EQ(err,
            "replicad: WARNING: the TLS files changed\nreplicad: INVALID_ARGUMENT: --listen\n");
}

TEST_F(LogTest, JsonLinesParseWhateverTheMessageHolds) {
  ConfigureLog(LogFormat::kJson, 0);
  const std::string hostile = std::string("model 'a\"b\\c'\n\t\x01 caf\xc3\xa9 \xff\xfe end");
  ::testing::internal::CaptureStdout();
  LogWarning(hostile);
  LogInfo("plain");
  const std::string out = ::testing::internal::GetCapturedStdout();
  const size_t newline = out.find('\n');
  ASSERT_NE(newline, std::string::npos);
  const nlohmann::json first = nlohmann::json::parse(out.substr(0, newline));
  EXPECT_EQ(first["level"], "warning");
  // The two bytes that are not UTF-8 become U+FFFD; everything else survives as it was.
  EXPECT_EQ(first["message"].get<std::string>(),
            std::string("model 'a\"b\\c'\n\t\x01 caf\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd end"));
  EXPECT_THAT(first["time"].get<std::string>(),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z"));
  const nlohmann::json second = nlohmann::json::parse(out.substr(newline + 1));
  EXPECT_EQ(second["level"], "info");
  EXPECT_EQ(second["message"], "plain");
}

TEST_F(LogTest, VerboseLinesAppearOnlyAtOrBelowTheLevel) {
  ConfigureLog(LogFormat::kJson, 0);
  EXPECT_FALSE(VerboseLogOn(1));
  ::testing::internal::CaptureStdout();
  LogVerbose(1, "hidden");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");

  ConfigureLog(LogFormat::kJson, 1);
  EXPECT_TRUE(VerboseLogOn(1));
  EXPECT_FALSE(VerboseLogOn(2));
  ::testing::internal::CaptureStdout();
  LogVerbose(2, "hidden");
  LogVerbose(1, "request 'r1'");
  const nlohmann::json line = nlohmann::json::parse(::testing::internal::GetCapturedStdout());
  EXPECT_EQ(line["level"], "verbose");
  EXPECT_EQ(line["verbose"], 1);
  EXPECT_EQ(line["message"], "request 'r1'");
}

TEST_F(LogTest, TheFormatIsTextOrJson) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  absl::StatusOr<LogFormat> bad = ParseLogFormat("yaml");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("expected text or json, got \"yaml\""));
}

}  // namespace
}  // namespace replicad
