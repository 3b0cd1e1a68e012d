#include "core/metrics/text_format.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "gtest/gtest.h"

namespace replicad {
namespace metrics {
namespace {

TEST(TextFormatTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");  // UTF-8 passes through.
}

TEST(TextFormatTest, EscapesHelpButKeepsQuotes) {
  EXPECT_EQ(EscapeHelp("say \"hi\"\\\nbye"), "say \"hi\"\\\\\\nbye");
}

TEST(TextFormatTest, FormatsValuesLikePrometheus) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(-2.5), "-2.5");
  EXPECT_EQ(FormatValue(0.0005), "0.0005");
  EXPECT_EQ(FormatValue(0.00001), "1e-05");
  EXPECT_EQ(FormatValue(1234567), "1234567");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(TextFormatTest, FormattedValuesReadBackExactly) {
  for (double v : {0.1 + 0.2, 1.0 / 3.0, 123456789.123456789, 9007199254740993.0, 5e-324}) {
    EXPECT_EQ(std::strtod(FormatValue(v).c_str(), nullptr), v) << FormatValue(v);
  }
}

TEST(TextFormatTest, ValidatesMetricNames) {
  for (const char* ok : {"a", "replicad_requests_total", "_x", ":recorded:rule", "A9_:"}) {
    EXPECT_TRUE(ValidateMetricName(ok).ok()) << ok;
  }
  for (const char* bad : {"", "9lives", "has-dash", "has space", "unicod\xc3\xa9"}) {
    absl::Status status = ValidateMetricName(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(TextFormatTest, ValidatesLabelNames) {
  for (const char* ok : {"model", "_private", "code2"}) {
    EXPECT_TRUE(ValidateLabelName(ok).ok()) << ok;
  }
  for (const char* bad : {"", "2x", "a:b", "with-dash", "__name__", "__reserved"}) {
    EXPECT_EQ(ValidateLabelName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace metrics
}  // namespace replicad
