// ServerMetrics as the scheduler's and serving core's observer: each call
// shows in the exposition with the right labels and values, and the whole
// output passes `promtool check metrics` (skipped without promtool).
#include "server/server_metrics.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/time/time.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/metrics/registry.h"
#include "core/model/default_model.h"
#include "core/serve/loaded_model.h"
#include "core/serve/model_statistics.h"
#include "core/serve/replica.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Exactly one sample line `line` (a whole line of the exposition).
::testing::Matcher<std::string> HasLine(const std::string& line) {
  return HasSubstr("\n" + line + "\n");
}

// The value of the sample line that starts with `series` and a space; NaN when absent.
double SampleValue(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

RequestTimes Times(double queue, double input, double infer, double output) {
  RequestTimes times;
  times.queue = absl::Seconds(queue);
  times.compute_input = absl::Seconds(input);
  times.compute_infer = absl::Seconds(infer);
  times.compute_output = absl::Seconds(output);
  return times;
}

// A placed model's pipelines report per slice (PipelineServable): the wall
// time, and per part its busy seconds and the bytes it read, summed per
// pipeline.
TEST(ServerMetricsTest, PipelineRunsAddUpPerPart) {
  metrics::Registry registry;
  ServerMetrics metrics(registry);
  PipelineObserver* pipelines = metrics.pipelines();
  pipelines->OnPipelineRun("resnet", 0, {{"dev0", 0, 0, 0}, {"dev1", 0, 0, 0}}, 0);
  pipelines->OnPipelineRun("resnet", 1, {{"dev0", 0, 0, 0}, {"dev1", 0, 0, 0}}, 0);
  EXPECT_THAT(registry.Render(),
              HasLine(R"(replicad_pipeline_part_busy_seconds_total{model="resnet",pipeline="1",)"
                      R"(part="1",context="dev1"} 0)"));
  pipelines->OnPipelineRun("resnet", 0, {{"dev0", 8, 1.25, 0}, {"dev1", 8, 1.0, 4096}}, 1.5);
  pipelines->OnPipelineRun("resnet", 0, {{"dev0", 8, 1.25, 0}, {"dev1", 8, 1.0, 4096}}, 1.5);
  pipelines->OnPipelineRun("resnet", 1, {{"dev0", 8, 0.5, 0}, {"dev1", 8, 0.5, 4096}}, 0.75);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasLine(R"(replicad_pipeline_seconds_total{model="resnet",pipeline="0"} 3)"));
  EXPECT_THAT(text,
              HasLine(R"(replicad_pipeline_seconds_total{model="resnet",pipeline="1"} 0.75)"));
  EXPECT_THAT(text, HasLine(R"(replicad_pipeline_part_busy_seconds_total{model="resnet",)"
                            R"(pipeline="0",part="0",context="dev0"} 2.5)"));
  EXPECT_THAT(text, HasLine(R"(replicad_pipeline_part_received_bytes_total{model="resnet",)"
                            R"(pipeline="0",part="1",context="dev1"} 8192)"));
}

TEST(ServerMetricsTest, OnInferredObservesEachPhase) {
  metrics::Registry registry;
  ServerMetrics metrics(registry);
  LoadedModel model;
  model.name = "mnist";
  metrics.OnInferred(model, 3, Times(0.000003, 0.00002, 0.004, 0.00004));
  metrics.OnInferred(model, 5, Times(0.2, 0.00002, 0.004, 0.00004));

  const std::string text = registry.Render();
  EXPECT_THAT(
      text,
      AllOf(
          HasLine("replicad_samples_total{model=\"mnist\"} 8"),
          // 3 us lands in the first bucket (10 us), 0.2 s in 0.25 s.
          HasLine("replicad_request_queue_seconds_bucket{model=\"mnist\",le=\"1e-05\"} 1"),
          HasLine("replicad_request_queue_seconds_bucket{model=\"mnist\",le=\"0.1\"} 1"),
          HasLine("replicad_request_queue_seconds_bucket{model=\"mnist\",le=\"0.25\"} 2"),
          HasLine("replicad_request_queue_seconds_count{model=\"mnist\"} 2"),
          HasLine(
              "replicad_request_compute_input_seconds_bucket{model=\"mnist\",le=\"2.5e-05\"} 2"),
          HasLine("replicad_request_compute_input_seconds_bucket{model=\"mnist\",le=\"1e-05\"} 0"),
          HasLine("replicad_request_compute_infer_seconds_bucket{model=\"mnist\",le=\"0.0025\"} 0"),
          HasLine("replicad_request_compute_infer_seconds_bucket{model=\"mnist\",le=\"0.005\"} 2"),
          HasLine("replicad_request_compute_output_seconds_bucket{model=\"mnist\",le=\"5e-05\"} 2"),
          HasLine("replicad_request_compute_output_seconds_count{model=\"mnist\"} 2"),
          HasLine("# TYPE replicad_request_compute_output_seconds histogram")));
  // Durations go through absl::Duration, so the sums are compared to the nanosecond.
  EXPECT_NEAR(SampleValue(text, "replicad_request_queue_seconds_sum{model=\"mnist\"}"), 0.200003,
              1e-9);
  EXPECT_NEAR(SampleValue(text, "replicad_request_compute_input_seconds_sum{model=\"mnist\"}"),
              0.00004, 1e-9);
  EXPECT_NEAR(SampleValue(text, "replicad_request_compute_infer_seconds_sum{model=\"mnist\"}"),
              0.008, 1e-9);
  EXPECT_NEAR(SampleValue(text, "replicad_request_compute_output_seconds_sum{model=\"mnist\"}"),
              0.00008, 1e-9);
}

TEST(ServerMetricsTest, SchedulerEventsShowPerModel) {
  metrics::Registry registry;
  ServerMetrics metrics(registry);
  metrics.OnBatch("mnist", 1, 1);
  metrics.OnBatch("mnist", 6, 3);
  metrics.OnBatch("mnist", 2000, 40);
  metrics.OnBatch("resnet", 8, 2);
  metrics.OnPending("mnist", 7);
  metrics.OnPending("mnist", 4);
  metrics.OnPending("resnet", 1);
  metrics.OnRefused("mnist", "queue_full");
  metrics.OnRefused("mnist", "queue_full");
  metrics.OnRefused("mnist", "deadline");
  metrics.OnRefused("mnist", "something_new");

  const std::string text = registry.Render();
  EXPECT_THAT(text, AllOf(HasLine("replicad_batch_size_bucket{model=\"mnist\",le=\"1\"} 1"),
                          HasLine("replicad_batch_size_bucket{model=\"mnist\",le=\"4\"} 1"),
                          HasLine("replicad_batch_size_bucket{model=\"mnist\",le=\"8\"} 2"),
                          HasLine("replicad_batch_size_bucket{model=\"mnist\",le=\"1024\"} 2"),
                          HasLine("replicad_batch_size_bucket{model=\"mnist\",le=\"+Inf\"} 3"),
                          HasLine("replicad_batch_size_sum{model=\"mnist\"} 2007"),
                          HasLine("replicad_batch_size_count{model=\"resnet\"} 1"),
                          HasLine("replicad_batches_total{model=\"mnist\"} 3"),
                          HasLine("replicad_batches_total{model=\"resnet\"} 1"),
                          HasLine("replicad_batched_requests_total{model=\"mnist\"} 44"),
                          HasLine("replicad_batched_requests_total{model=\"resnet\"} 2"),
                          HasLine("replicad_pending_requests{model=\"mnist\"} 4"),
                          HasLine("replicad_pending_requests{model=\"resnet\"} 1")));
  EXPECT_THAT(
      text,
      AllOf(HasLine("replicad_refused_requests_total{model=\"mnist\",reason=\"queue_full\"} 2"),
            HasLine("replicad_refused_requests_total{model=\"mnist\",reason=\"deadline\"} 1"),
            HasLine("replicad_refused_requests_total{model=\"mnist\",reason=\"something_new\"} 1"),
            // Every known reason is there from the model's first event.
            HasLine("replicad_refused_requests_total{model=\"mnist\",reason=\"queue_bytes\"} 0"),
            HasLine("replicad_refused_requests_total{model=\"mnist\",reason=\"timeout\"} 0"),
            HasLine("replicad_refused_requests_total{model=\"mnist\",reason=\"cancelled\"} 0"),
            HasLine("replicad_refused_requests_total{model=\"mnist\",reason=\"stopping\"} 0"),
            HasLine("replicad_refused_requests_total{model=\"resnet\",reason=\"queue_full\"} 0")));
}

TEST(ServerMetricsTest, OnSlotSpeedSetsTheSlotGauges) {
  metrics::Registry registry;
  ServerMetrics metrics(registry);
  metrics.OnSlotSpeed("mnist", "r0", "cuda:0", 1000, 0.5);
  metrics.OnSlotSpeed("mnist", "r1", "cpu:0", 250, 0.5);
  metrics.OnSlotSpeed("mnist", "r0", "cuda:0", 1200, 0.75);
  metrics.OnSlotSpeed("mnist", "r1", "cpu:0", 400, 0.25);

  const std::string text = registry.Render();
  EXPECT_THAT(
      text,
      AllOf(
          HasLine(
              "replicad_slot_rows_per_second{model=\"mnist\",slot=\"r0\",device=\"cuda:0\"} 1200"),
          HasLine(
              "replicad_slot_rows_per_second{model=\"mnist\",slot=\"r1\",device=\"cpu:0\"} 400"),
          HasLine("replicad_slot_share{model=\"mnist\",slot=\"r0\",device=\"cuda:0\"} 0.75"),
          HasLine("replicad_slot_share{model=\"mnist\",slot=\"r1\",device=\"cpu:0\"} 0.25"),
          HasLine("# TYPE replicad_slot_share gauge")));
  // No computed utilisation gauge: rate(replicad_slot_busy_seconds_total) is it.
  EXPECT_THAT(text, Not(HasSubstr("utilisation")));
  EXPECT_THAT(text, Not(HasSubstr("utilization")));
}

// The plan-memory gauge follows the slot's cache after a build (and after
// every slice, through OnSliceRun).
TEST(ServerMetricsTest, PlanMemoryGaugeShowsWhatTheSlotsPlansHold) {
  metrics::Registry registry;
  ServerMetrics metrics(registry);
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      Replica::Create(*LoadDefaultModel(), SlotAssignment{"r0", cpu.id, 1},
                      CreateCpuDevice(cpu, CpuSlotOptions{1}), 4, size_t{64} << 20);
  ASSERT_TRUE(replica.ok()) << replica.status();
  ASSERT_TRUE((*replica)->PlanFor({{8, 1, 28, 28}}).ok());
  metrics.OnPlansBuilt(**replica, 1, 0.01);
  const double held = SampleValue(
      registry.Render(),
      "replicad_slot_plan_memory_bytes{model=\"default\",slot=\"r0\",device=\"cpu:0\"}");
  EXPECT_GT(held, 0);
  EXPECT_EQ(held, static_cast<double>((*replica)->plan_memory_bytes()));
}

TEST(ServerMetricsTest, ExpositionPassesPromtool) {
  metrics::Registry registry;
  ServerMetrics metrics(registry);
  LoadedModel model;
  model.name = "mnist";
  metrics.RecordRequest("mnist", "ModelInfer", absl::OkStatus(), 0.01);
  metrics.AddDeviceSlot("cpu:0");
  metrics.OnInferred(model, 2, Times(0.001, 0.0001, 0.003, 0.0001));
  metrics.OnBatch("mnist", 2, 2);
  metrics.OnPending("mnist", 3);
  metrics.OnRefused("mnist", "timeout");
  metrics.OnSlotSpeed("mnist", "r0", "cpu:0", 512, 1);

  const std::string file = ::testing::TempDir() + "/server_metrics.prom";
  std::ofstream(file) << registry.Render();
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "no promtool";
  testing::CommandResult check =
      testing::RunCommand({"/bin/sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(check.exit_code, 0) << check.out << "\nfor:\n" << registry.Render();
}

}  // namespace
}  // namespace replicad
