#include "core/metrics/registry.h"

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace metrics {
namespace {

TEST(RegistryTest, RendersASmallRegistryExactly) {
  Registry registry;
  CounterFamily& requests =
      registry.AddCounter("replicad_requests_total", "Requests handled.", {"model", "code"});
  requests.WithLabels({"resnet", "OK"}).Increment(3);
  requests.WithLabels({"bert", "UNAVAILABLE"}).Increment();
  registry.AddGauge("replicad_queue_depth", "Requests waiting.").WithLabels({}).Set(2.5);
  Histogram& latency =
      registry.AddHistogram("replicad_latency_seconds", "Latency.", {"model"}, {0.1, 0.5, 1})
          .WithLabels({"bert"});
  for (double v : {0.25, 0.5, 3.0}) latency.Observe(v);
  registry.AddCounter("replicad_errors_total", "Errors, none yet.", {"model"});

  EXPECT_EQ(registry.Render(),
            "# HELP replicad_errors_total Errors, none yet.\n"
            "# TYPE replicad_errors_total counter\n"
            "# HELP replicad_latency_seconds Latency.\n"
            "# TYPE replicad_latency_seconds histogram\n"
            "replicad_latency_seconds_bucket{model=\"bert\",le=\"0.1\"} 0\n"
            "replicad_latency_seconds_bucket{model=\"bert\",le=\"0.5\"} 2\n"
            "replicad_latency_seconds_bucket{model=\"bert\",le=\"1\"} 2\n"
            "replicad_latency_seconds_bucket{model=\"bert\",le=\"+Inf\"} 3\n"
            "replicad_latency_seconds_sum{model=\"bert\"} 3.75\n"
            "replicad_latency_seconds_count{model=\"bert\"} 3\n"
            "# HELP replicad_queue_depth Requests waiting.\n"
            "# TYPE replicad_queue_depth gauge\n"
            "replicad_queue_depth 2.5\n"
            "# HELP replicad_requests_total Requests handled.\n"
            "# TYPE replicad_requests_total counter\n"
            "replicad_requests_total{model=\"bert\",code=\"UNAVAILABLE\"} 1\n"
            "replicad_requests_total{model=\"resnet\",code=\"OK\"} 3\n");
}

TEST(RegistryTest, UnlabeledFamiliesAreExportedBeforeTheFirstUpdate) {
  Registry registry;
  registry.AddCounter("a_total", "A.");
  registry.AddHistogram("b_seconds", "B.", {}, {1});
  EXPECT_EQ(registry.Render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n"
            "# HELP b_seconds B.\n# TYPE b_seconds histogram\n"
            "b_seconds_bucket{le=\"1\"} 0\nb_seconds_bucket{le=\"+Inf\"} 0\n"
            "b_seconds_sum 0\nb_seconds_count 0\n");
}

TEST(RegistryTest, EscapesLabelValuesAndHelp) {
  Registry registry;
  registry.AddGauge("g", "Line one\\\nline \"two\".", {"path"})
      .WithLabels({"C:\\models\\\"new\"\nv2"})
      .Set(1);
  EXPECT_EQ(registry.Render(),
            "# HELP g Line one\\\\\\nline \"two\".\n"
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\models\\\\\\\"new\\\"\\nv2\"} 1\n");
}

TEST(RegistryTest, WithLabelsReturnsTheSameChildEveryTime) {
  Registry registry;
  CounterFamily& family = registry.AddCounter("c_total", "C.", {"model"});
  Counter& first = family.WithLabels({"m"});
  EXPECT_EQ(&family.WithLabels({"m"}), &first);
  EXPECT_NE(&family.WithLabels({"other"}), &first);
}

TEST(RegistryTest, CountersIgnoreNegativeAndNanIncrements) {
  Registry registry;
  Counter& counter = registry.AddCounter("c_total", "C.").WithLabels({});
  counter.Increment(2);
  counter.Increment(-1);
  counter.Increment(std::nan(""));
  EXPECT_EQ(counter.Value(), 2);
}

TEST(RegistryTest, GaugesGoBothWays) {
  Registry registry;
  Gauge& gauge = registry.AddGauge("g", "G.").WithLabels({});
  gauge.Add(5);
  gauge.Add(-7);
  EXPECT_EQ(gauge.Value(), -2);
  gauge.Set(0.5);
  EXPECT_EQ(gauge.Value(), 0.5);
}

TEST(RegistryTest, ConcurrentUpdatesSumExactlyWhileRendering) {
  Registry registry;
  CounterFamily& counters = registry.AddCounter("c_total", "C.", {"worker"});
  Gauge& gauge = registry.AddGauge("g", "G.").WithLabels({});
  Histogram& histogram = registry.AddHistogram("h_seconds", "H.", {}, {0.5}).WithLabels({});
  constexpr int kThreads = 8;
  constexpr int kIterations = 50000;
  std::atomic<bool> done{false};
  std::thread renderer([&] {
    while (!done.load()) ASSERT_FALSE(registry.Render().empty());
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      // Half the workers share one child, so the same atomics are contended.
      Counter& shared = counters.WithLabels({"shared"});
      Counter& own = counters.WithLabels({absl::StrCat("w", t)});
      for (int i = 0; i < kIterations; ++i) {
        shared.Increment();
        own.Increment(0.5);
        gauge.Add(t % 2 == 0 ? 1 : -1);
        histogram.Observe(i % 2 == 0 ? 0.25 : 1.0);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done = true;
  renderer.join();

  EXPECT_EQ(counters.WithLabels({"shared"}).Value(), kThreads * kIterations);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(counters.WithLabels({absl::StrCat("w", t)}).Value(), kIterations * 0.5);
  }
  EXPECT_EQ(gauge.Value(), 0);
  const Histogram::Snapshot snapshot = histogram.Read();
  EXPECT_EQ(snapshot.count, uint64_t{kThreads} * kIterations);
  EXPECT_EQ(snapshot.cumulative_counts[0], uint64_t{kThreads} * kIterations / 2);
  EXPECT_EQ(snapshot.sum, kThreads * (kIterations / 2) * (0.25 + 1.0));
}

TEST(RegistryDeathTest, WrongLabelCountAborts) {
  Registry registry;
  CounterFamily& family = registry.AddCounter("c_total", "C.", {"model", "code"});
  EXPECT_DEATH(family.WithLabels({"m"}), "c_total has labels \\{model,code\\}");
}

TEST(RegistryDeathTest, BadNamesAbort) {
  Registry registry;
  EXPECT_DEATH(registry.AddCounter("bad-name_total", "H."), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("requests", "H."), "end in _total");
  EXPECT_DEATH(registry.AddGauge("in_flight_total", "H."), "only counter");
  EXPECT_DEATH(registry.AddGauge("g", ""), "help text is empty");
  EXPECT_DEATH(registry.AddGauge("g", "H.", {"a", "a"}), "repeats");
  EXPECT_DEATH(registry.AddGauge("g", "H.", {"__x"}), "reserved");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {"le"}), "reserved for histogram");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {}, {2, 1}), "strictly increase");
}

TEST(RegistryDeathTest, NameCollisionsAbort) {
  Registry registry;
  registry.AddGauge("g", "G.");
  registry.AddHistogram("latency", "L.");
  registry.AddGauge("size_sum", "S.");
  EXPECT_DEATH(registry.AddGauge("g", "H."), "already used");
  EXPECT_DEATH(registry.AddHistogram("g", "H."), "already used");
  // Samples of one family would land inside the other's in the exposition.
  EXPECT_DEATH(registry.AddGauge("latency_count", "H."), "already used");
  EXPECT_DEATH(registry.AddHistogram("size", "H."), "already used");
}

}  // namespace
}  // namespace metrics
}  // namespace replicad
