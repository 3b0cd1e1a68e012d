// Checks Registry::Render() with Prometheus' own parser and linter,
// `promtool check metrics`, which exits non-zero on a parse error or a lint
// problem (missing _total, missing help, reserved labels, ...).

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/metrics/registry.h"
#include "gtest/gtest.h"

namespace replicad {
namespace metrics {
namespace {

// The full path of promtool on PATH, or "" when it is absent.
std::string FindPromtool() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin", ':')) {
    std::string candidate = std::string(dir) + "/promtool";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct CheckResult {
  int exit_code = -1;
  std::string output;
};

CheckResult CheckMetrics(const std::string& promtool, const std::string& exposition,
                         const std::string& file_name) {
  const std::string file = ::testing::TempDir() + "/" + file_name;
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << exposition;
  }
  CheckResult result;
  const std::string command = "'" + promtool + "' check metrics < '" + file + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  std::remove(file.c_str());
  return result;
}

TEST(PromtoolTest, RenderOfEveryMetricKindPassesPromtool) {
  const std::string promtool = FindPromtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool is not on PATH (Debian package prometheus)";

  Registry registry;
  CounterFamily& requests = registry.AddCounter(
      "replicad_requests_total", "Requests handled, by model, method and status code.",
      {"model", "method", "code"});
  requests.WithLabels({"resnet50", "Predict", "OK"}).Increment(41);
  requests.WithLabels({"weird \"model\"\\\nname", "TrainStep", "INVALID_ARGUMENT"}).Increment();
  registry.AddCounter("replicad_bytes_received_total", "Request bytes.")
      .WithLabels({})
      .Increment(1e21);
  GaugeFamily& ready =
      registry.AddGauge("replicad_replicas_ready", "Replicas able to serve.", {"model", "device"});
  ready.WithLabels({"resnet50", "cuda:0"}).Set(1);
  ready.WithLabels({"resnet50", "cpu:0"}).Set(0);
  registry.AddGauge("replicad_temperature_celsius", "A gauge at NaN.")
      .WithLabels({})
      .Set(std::nan(""));
  registry.AddGauge("replicad_headroom_bytes", "A gauge at +Inf.")
      .WithLabels({})
      .Set(std::numeric_limits<double>::infinity());
  HistogramFamily& latency = registry.AddHistogram(
      "replicad_request_duration_seconds", "Predict latency, receipt to response.", {"model"});
  for (double v : {0.0001, 0.003, 0.02, 0.2, 4.0, 60.0}) {
    latency.WithLabels({"resnet50"}).Observe(v);
  }
  latency.WithLabels({"bert"});
  registry.AddHistogram("replicad_batch_size", "Examples per batch.", {}, {1, 2, 4, 8, 16, 32})
      .WithLabels({})
      .Observe(5);

  const std::string exposition = registry.Render();
  const CheckResult result = CheckMetrics(promtool, exposition, "metrics_promtool_ok.prom");
  EXPECT_EQ(result.exit_code, 0) << "promtool said:\n" << result.output << "\nfor:\n" << exposition;
}

// Guards the test above against passing vacuously (promtool accepts an empty
// file, and a broken invocation could read as success).
TEST(PromtoolTest, PromtoolRejectsBrokenExpositions) {
  const std::string promtool = FindPromtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool is not on PATH (Debian package prometheus)";
  EXPECT_NE(CheckMetrics(promtool, "# TYPE x counter\nx{a=\"b} 1\n", "broken.prom").exit_code, 0);
  EXPECT_NE(CheckMetrics(promtool, "# HELP x X.\n# TYPE x counter\nx 1\n", "lint.prom").exit_code,
            0);
}

}  // namespace
}  // namespace metrics
}  // namespace replicad
