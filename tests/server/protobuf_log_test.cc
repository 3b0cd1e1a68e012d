// Protobuf's per-request log lines are rate-limited.
#include "server/protobuf_log.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(LogLimiterTest, LetsABurstThroughPerWindowAndCountsTheRest) {
  std::vector<std::string> written;
  LogLimiter limiter(2, absl::Minutes(1),
                     [&](const std::string& line) { written.push_back(line); });
  const absl::Time start = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 1000; ++i) limiter.Log("bad utf-8\n", start + absl::Milliseconds(i));
  EXPECT_EQ(written, (std::vector<std::string>{"bad utf-8\n", "bad utf-8\n"}));
  limiter.Log("next\n", start + absl::Minutes(2));
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(written[2], "(998 similar lines dropped in the last 1m)\nnext\n");
}

}  // namespace
}  // namespace replicad
