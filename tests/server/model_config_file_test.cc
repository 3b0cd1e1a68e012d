// Triton's config.pbtxt: parsing, every refusal, the version policies, the
// instance groups' slots, the tensors against the ONNX model, and a
// Triton-layout repository loaded through LocalModelRepository.
//
// Covered: instance groups, max_batch_size, version policies and dynamic batching as loaded and
// reported; every unsupported field refused by name, parse errors by file, line and column; the
// repository's fingerprint follows the config (what poll mode reloads on). HarmlessConfigFieldsTest
// checks that docs/model-repositories.md lists every field accepted without being honoured.
#include "server/model_config_file.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/model/onnx_builder.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/inference_protocol.h"
#include "server/local_model_repository.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

namespace fs = std::filesystem;
using inference::ModelInstanceGroup;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory per test.
fs::path TestDir() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / "model_config_file_test" /
                 absl::StrCat(test->test_suite_name(), ".", test->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// Writes `text` as DIR/m/config.pbtxt and reads it as model "m".
absl::StatusOr<inference::ModelConfig> Read(const std::string& text) {
  const fs::path path = TestDir() / "m" / "config.pbtxt";
  WriteFile(path, text);
  return ReadModelConfig(path.string(), "m");
}

inference::ModelConfig Parsed(const std::string& text) {
  inference::ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// x float32[N,?] -> y = Relu(x): an input whose second dimension is open.
std::string OpenDimOnnx() {
  OnnxModelBuilder b("open_dim");
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, kAnyDim});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kAnyDim});
  return b.Serialize();
}

// x float32[2,4] -> y = Relu(x): a model that does not batch.
std::string FixedBatchOnnx() {
  OnnxModelBuilder b("fixed_batch");
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {2, 4});
  b.AddOutput("y", DType::kFloat32, {2, 4});
  return b.Serialize();
}

// A realistic Triton configuration of TwoInputTwoOutputOnnx().
constexpr char kTritonConfig[] = R"(
  name: "m"
  platform: "onnxruntime_onnx"
  max_batch_size: 8
  input [
    { name: "image" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 6, 6 ] },
    { name: "features" data_type: TYPE_FP32 dims: [ 5 ] }
  ]
  output [
    { name: "sum" data_type: TYPE_FP32 dims: [ 2 ] },
    { name: "probabilities" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "labels.txt" }
  ]
  instance_group [ { count: 2 kind: KIND_CPU } ]
  version_policy: { all {} }
  dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
  parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
  model_warmup [ { name: "zeros" batch_size: 1 } ]
  optimization { input_pinned_memory { enable: true } graph { level: 1 } }
  model_transaction_policy { decoupled: false }
)";

TEST(ReadModelConfigTest, AcceptsARealisticTritonConfig) {
  absl::StatusOr<inference::ModelConfig> config = Read(kTritonConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_batch_size(), 8);
  EXPECT_EQ(config->backend(), "onnxruntime");  // Filled in.
  EXPECT_EQ(config->dynamic_batching().max_queue_delay_microseconds(), 100);
}

TEST(ReadModelConfigTest, FillsInNamePlatformAndBackend) {
  absl::StatusOr<inference::ModelConfig> config = Read("max_batch_size: 4");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "m");
  EXPECT_EQ(config->platform(), "onnxruntime_onnx");
  EXPECT_EQ(config->backend(), "onnxruntime");
}

TEST(ReadModelConfigTest, ParseErrorNamesFileLineAndColumn) {
  absl::StatusOr<inference::ModelConfig> config = Read("name: \"m\"\nmax_batch_size: eight\n");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().ToString(), HasSubstr("m/config.pbtxt:2:17: "));
  config = Read("name: \"m\"\n  no_such_field: 1\n");
  EXPECT_THAT(config.status().ToString(),
              AllOf(HasSubstr("config.pbtxt:2:"), HasSubstr("no_such_field")));
}

TEST(ReadModelConfigTest, MissingFileIsNotFound) {
  EXPECT_EQ(ReadModelConfig((TestDir() / "none.pbtxt").string(), "m").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ReadModelConfigTest, RefusesEveryUnsupportedFieldByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"sequence_batching {}", "'sequence_batching'"},
      {"ensemble_scheduling { step [ { model_name: \"a\" } ] }", "'ensemble_scheduling'"},
      {"input [ { name: \"x\" dims: [1] reshape { shape: [ 1 ] } } ]", "'input[0].reshape.shape'"},
      {"input [ { name: \"x\" }, { name: \"y\" optional: true } ]", "'input[1].optional'"},
      {"output [ { name: \"y\" is_shape_tensor: true } ]", "'output[0].is_shape_tensor'"},
      {"instance_group [ { count: 1 host_policy: \"numa0\" } ]", "'instance_group[0].host_policy'"},
      {"instance_group [ { passive: true } ]", "'instance_group[0].passive'"},
      {"optimization { execution_accelerators { gpu_execution_accelerator [ { name: "
       "\"tensorrt\" } ] } }",
       "'optimization.execution_accelerators.gpu_execution_accelerator'"},
      {"optimization { eager_batching: true }", "'optimization.eager_batching'"},
      {"sequence_batching { oldest { preferred_batch_size: [ 4 ] } }", "'sequence_batching'"},
      {"model_transaction_policy { decoupled: true }", "'model_transaction_policy.decoupled'"},
      {"cc_model_filenames { key: \"7.5\" value: \"a.onnx\" }", "'cc_model_filenames'"},
      {"runtime: \"libtriton_onnxruntime.so\"", "'runtime'"},
      {"batch_input [ { target_name: \"n\" } ]", "'batch_input'"},
      {"model_repository_agents { agents [ { name: \"checksum\" } ] }",
       "'model_repository_agents.agents'"},
  };
  for (const auto& [text, field] : cases) {
    absl::StatusOr<inference::ModelConfig> config = Read(text);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(config.status().ToString(),
                AllOf(HasSubstr(absl::StrCat("field ", field, " is not supported")),
                      HasSubstr("config.pbtxt")))
        << text;
  }
}

TEST(ReadModelConfigTest, RefusesWrongNamePlatformBackendAndSizes) {
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"name: \"other\"", {"name: expected 'm'", "received 'other'"}},
      {"platform: \"tensorrt_plan\"",
       {"platform: expected 'onnxruntime_onnx'", "received 'tensorrt_plan'"}},
      {"backend: \"python\"", {"backend: expected 'onnxruntime'", "received 'python'"}},
      {"default_model_filename: \"net.onnx\"",
       {"default_model_filename: expected 'model.onnx'", "received 'net.onnx'"}},
      {"max_batch_size: -1", {"max_batch_size", "received -1"}},
      {"input [ { name: \"x\" }, { name: \"x\" } ]", {"input[1].name: 'x' is listed twice"}},
      {"instance_group [ { count: -2 } ]", {"instance_group[0].count", "received -2"}},
      // Found while writing fuzz/model_config_fuzzer: 2^31-1 slots were allocated one by one.
      {"instance_group [ { kind: KIND_CPU count: 2147483647 } ]",
       {"instance_group[0].count: expected at most 1024 instances in all groups",
        "received 2147483647"}},
      {"instance_group [ { count: 1000 }, { count: 20 gpus: [ 0, 1 ] } ]",
       {"instance_group[1].count: expected at most 1024", "received 20 on each of 2 gpus",
        "which makes 1040"}},
      {"instance_group [ { kind: KIND_MODEL } ]", {"instance_group[0].kind", "KIND_MODEL"}},
      {"instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]", {"instance_group[0].gpus"}},
      {"version_policy { latest { num_versions: 0 } }",
       {"version_policy.latest.num_versions", "received 0"}},
      {"version_policy { specific {} }", {"version_policy.specific.versions", "received none"}},
      {"version_policy { specific { versions: [ 1, -3 ] } }",
       {"version_policy.specific.versions", "received -3"}},
  };
  for (const auto& [text, parts] : cases) {
    absl::StatusOr<inference::ModelConfig> config = Read(text);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << text;
    for (const char* part : parts) EXPECT_THAT(config.status().ToString(), HasSubstr(part));
  }
}

TEST(ReadModelConfigTest, AcceptsHarmlessAndDefaultOnlyFields) {
  for (const char* text : {
           "metric_tags { key: \"team\" value: \"a\" }",
           "response_cache { enable: true }",
           "output [ { name: \"y\" label_filename: \"labels.txt\" } ]",
           "instance_group [ { rate_limiter { priority: 2 } } ]",
           "optimization { cuda { graphs: true } priority: PRIORITY_MAX }",
           "model_operations {}",  // Sets nothing.
           "default_model_filename: \"model.onnx\" name: \"m\" backend: \"onnxruntime\"",
       }) {
    EXPECT_TRUE(Read(text).ok()) << text << ": " << Read(text).status();
  }
}

// Every dynamic_batching field is honoured; one the proto lacks fails the
// parse by name, as any unknown field does.
TEST(ReadModelConfigTest, RefusesAnUnknownDynamicBatchingFieldByName) {
  absl::StatusOr<inference::ModelConfig> config =
      Read("max_batch_size: 8\ndynamic_batching { max_batch_size: 4 }\n");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().ToString(),
              AllOf(HasSubstr("m/config.pbtxt:2:"), HasSubstr("max_batch_size")));
}

TEST(ReadModelConfigTest, RefusesInvalidDynamicBatchingNamingTheFieldAndFile) {
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 4, 16 ] }",
       {"dynamic_batching.preferred_batch_size[1]: expected 1..8 (max_batch_size)", "received 16"}},
      {"max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 0 ] }",
       {"dynamic_batching.preferred_batch_size[0]", "received 0"}},
      {"dynamic_batching { preferred_batch_size: [ 4 ] }",
       {"dynamic_batching.preferred_batch_size: expected none, as max_batch_size 0", "received 4"}},
      {"max_batch_size: 8 dynamic_batching { priority_levels: 2 }",
       {"dynamic_batching.default_priority_level: expected 1..2", "received 0"}},
      {"max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
       {"dynamic_batching.default_priority_level: expected 1..2", "received 3"}},
      {"max_batch_size: 8 dynamic_batching { default_priority_level: 1 }",
       {"dynamic_batching.default_priority_level: expected 0 without priority_levels",
        "received 1"}},
      {"max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 1 "
       "priority_queue_policy { key: 3 value: { max_queue_size: 1 } } }",
       {"dynamic_batching.priority_queue_policy: expected levels 1..2", "received 3"}},
      {"max_batch_size: 8 dynamic_batching { priority_queue_policy { key: 1 value: {} } }",
       {"dynamic_batching.priority_queue_policy: expected none without priority_levels",
        "received level 1"}},
      {"max_batch_size: 8 dynamic_batching { priority_levels: 4294967296 }",
       {"dynamic_batching.priority_levels: expected at most 4294967295", "received 4294967296"}},
      {"max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 9223372036854775808 }",
       {"dynamic_batching.max_queue_delay_microseconds: expected at most"}},
      {"max_batch_size: 8 dynamic_batching { default_queue_policy { "
       "default_timeout_microseconds: 18446744073709551615 } }",
       {"dynamic_batching.default_queue_policy.default_timeout_microseconds: expected at most"}},
  };
  for (const auto& [text, parts] : cases) {
    absl::StatusOr<inference::ModelConfig> config = Read(text);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(config.status().ToString(), HasSubstr("m/config.pbtxt: ")) << text;
    for (const char* part : parts) {
      EXPECT_THAT(config.status().ToString(), HasSubstr(part)) << text;
    }
  }
}

// The daemon's defaults as flags other than the defaults would make them.
SchedulerOptions DaemonScheduling() {
  SchedulerOptions daemon;
  daemon.dynamic_batching = true;
  daemon.max_batch_size = 64;
  daemon.preferred_batch_sizes = {2, 4};
  daemon.max_queue_delay = absl::Microseconds(7);
  daemon.default_queue_policy.max_queue_size = 5;
  daemon.measured_weights = false;
  daemon.max_queue_bytes = 1234;
  return daemon;
}

TEST(SchedulerOptionsOfTest, WithoutDynamicBatchingTritonsDefaults) {
  absl::StatusOr<SchedulerOptions> options =
      SchedulerOptionsOf(Parsed("max_batch_size: 8"), DaemonScheduling());
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->dynamic_batching);
  EXPECT_EQ(options->max_batch_size, 8);
  EXPECT_TRUE(options->preferred_batch_sizes.empty());
  EXPECT_EQ(options->max_queue_delay, absl::ZeroDuration());
  EXPECT_FALSE(options->preserve_ordering);
  EXPECT_EQ(options->priority_levels, 0u);
  EXPECT_EQ(options->default_priority_level, 0u);
  EXPECT_EQ(options->default_queue_policy.timeout_action, QueuePolicy::TimeoutAction::kReject);
  EXPECT_EQ(options->default_queue_policy.default_timeout, absl::ZeroDuration());
  EXPECT_FALSE(options->default_queue_policy.allow_timeout_override);
  EXPECT_EQ(options->default_queue_policy.max_queue_size, 0u);
  EXPECT_TRUE(options->priority_queue_policy.empty());
  // What a configuration cannot say stays the daemon's.
  EXPECT_FALSE(options->measured_weights);
  EXPECT_EQ(options->max_queue_bytes, 1234u);
}

TEST(SchedulerOptionsOfTest, ModelWarmupsBatchSizesAreWarmed) {
  SchedulerOptions daemon = DaemonScheduling();
  daemon.warmup_max_rows = 4;
  absl::StatusOr<SchedulerOptions> options = SchedulerOptionsOf(Parsed(R"(max_batch_size: 8
                model_warmup { name: "a" batch_size: 3 }
                model_warmup { name: "b" batch_size: 8 count: 2 })"),
                                                                daemon);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->warmup_max_rows, 4);
  EXPECT_EQ(options->warmup_batch_sizes, (std::vector<int64_t>{3, 8}));

  for (const char* size : {"0", "9"}) {
    absl::StatusOr<SchedulerOptions> refused = SchedulerOptionsOf(
        Parsed(
            absl::StrCat("max_batch_size: 8 model_warmup { name: \"a\" batch_size: ", size, " }")),
        daemon);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_THAT(refused.status().message(),
                AllOf(HasSubstr("model_warmup[0].batch_size: expected 1..8"),
                      HasSubstr(absl::StrCat("received ", size))));
  }
}

TEST(SchedulerOptionsOfTest, SequenceBucketsAreReadFromTheParameters) {
  absl::StatusOr<SchedulerOptions> options =
      SchedulerOptionsOf(Parsed(R"(max_batch_size: 8 dynamic_batching {}
                parameters { key: "sequence_buckets" value { string_value: "32,64,128" } })"),
                         DaemonScheduling());
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->sequence_buckets, (std::vector<int64_t>{32, 64, 128}));
  for (const char* text : {"64,32", "0,8", "32;64", "", "8,2000000"}) {
    absl::StatusOr<SchedulerOptions> refused = SchedulerOptionsOf(
        Parsed(absl::StrCat(
            "max_batch_size: 8 parameters { key: \"sequence_buckets\" value { string_value: \"",
            text, "\" } }")),
        DaemonScheduling());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(refused.status().message(), HasSubstr("parameters.sequence_buckets: expected"))
        << text;
  }
}

TEST(SchedulerOptionsOfTest, EmptyDynamicBatchingBatchesWithTritonsDefaults) {
  absl::StatusOr<SchedulerOptions> options =
      SchedulerOptionsOf(Parsed("max_batch_size: 8 dynamic_batching {}"), SchedulerOptions());
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->dynamic_batching);
  EXPECT_TRUE(options->preferred_batch_sizes.empty());
  EXPECT_FALSE(options->default_queue_policy.allow_timeout_override);
  EXPECT_TRUE(options->measured_weights);
  EXPECT_EQ(options->max_queue_bytes, uint64_t{1} << 30);
}

TEST(SchedulerOptionsOfTest, EveryDynamicBatchingField) {
  absl::StatusOr<SchedulerOptions> options = SchedulerOptionsOf(Parsed(R"(
    max_batch_size: 16
    dynamic_batching {
      preferred_batch_size: [ 8, 4, 8 ]
      max_queue_delay_microseconds: 250
      preserve_ordering: true
      priority_levels: 3
      default_priority_level: 2
      default_queue_policy {
        timeout_action: DELAY default_timeout_microseconds: 1000
        allow_timeout_override: true max_queue_size: 10
      }
      priority_queue_policy { key: 1 value: { max_queue_size: 2 } }
      priority_queue_policy {
        key: 3 value: { timeout_action: REJECT default_timeout_microseconds: 50 }
      }
    })"),
                                                                DaemonScheduling());
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->dynamic_batching);
  EXPECT_EQ(options->max_batch_size, 16);
  EXPECT_THAT(options->preferred_batch_sizes, ElementsAre(4, 8));  // A set, as in Triton.
  EXPECT_EQ(options->max_queue_delay, absl::Microseconds(250));
  EXPECT_TRUE(options->preserve_ordering);
  EXPECT_EQ(options->priority_levels, 3u);
  EXPECT_EQ(options->default_priority_level, 2u);
  const QueuePolicy& fallback = options->default_queue_policy;
  EXPECT_EQ(fallback.timeout_action, QueuePolicy::TimeoutAction::kDelay);
  EXPECT_EQ(fallback.default_timeout, absl::Milliseconds(1));
  EXPECT_TRUE(fallback.allow_timeout_override);
  EXPECT_EQ(fallback.max_queue_size, 10u);
  ASSERT_EQ(options->priority_queue_policy.size(), 2u);
  const QueuePolicy& first = options->priority_queue_policy.at(1);
  EXPECT_EQ(first.timeout_action, QueuePolicy::TimeoutAction::kReject);
  EXPECT_EQ(first.default_timeout, absl::ZeroDuration());
  EXPECT_FALSE(first.allow_timeout_override);
  EXPECT_EQ(first.max_queue_size, 2u);
  const QueuePolicy& third = options->priority_queue_policy.at(3);
  EXPECT_EQ(third.default_timeout, absl::Microseconds(50));
  EXPECT_EQ(third.max_queue_size, 0u);
  EXPECT_EQ(&options->PolicyOf(2), &options->default_queue_policy);
  EXPECT_EQ(options->LevelOf(0), 2u);
  EXPECT_FALSE(options->measured_weights);
  EXPECT_EQ(options->max_queue_bytes, 1234u);
}

// max_batch_size 0: no batch dimension, so nothing is fused; the queue
// settings still hold.
TEST(SchedulerOptionsOfTest, MaxBatchSizeZeroQueuesWithoutFusing) {
  absl::StatusOr<SchedulerOptions> options =
      SchedulerOptionsOf(Parsed("dynamic_batching { preserve_ordering: true priority_levels: 2 "
                                "default_priority_level: 1 }"),
                         SchedulerOptions());
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->dynamic_batching);
  EXPECT_EQ(options->max_batch_size, 0);
  EXPECT_TRUE(options->preserve_ordering);
  EXPECT_EQ(options->priority_levels, 2u);
}

TEST(SelectVersionsTest, EveryPolicy) {
  const std::vector<int64_t> available = {3, 1, 2};
  auto select = [&](const std::string& text) {
    return SelectVersions(Parsed(text).version_policy(), available);
  };
  EXPECT_THAT(*select(""), ElementsAre(3));  // Triton's default, latest{1}.
  EXPECT_THAT(*select("version_policy { latest { num_versions: 2 } }"), ElementsAre(2, 3));
  EXPECT_THAT(*select("version_policy { latest { num_versions: 9 } }"), ElementsAre(1, 2, 3));
  EXPECT_THAT(*select("version_policy { all {} }"), ElementsAre(1, 2, 3));
  EXPECT_THAT(*select("version_policy { specific { versions: [3, 1] } }"), ElementsAre(1, 3));
  absl::StatusOr<std::vector<int64_t>> missing =
      select("version_policy { specific { versions: [1, 4] } }");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().ToString(),
              AllOf(HasSubstr("version 4 is not in the repository"), HasSubstr("1, 2, 3")));
}

std::vector<DeviceInfo> CpusAndGpu() {
  std::vector<DeviceInfo> devices(2);
  devices[0].id = {DeviceKind::kCpu, 0};
  devices[1].id = {DeviceKind::kCpu, 1};
  DeviceInfo gpu;
  gpu.id = {DeviceKind::kCuda, 0};
  devices.push_back(gpu);
  return devices;
}

std::vector<std::string> SlotDevices(const std::vector<SlotAssignment>& slots) {
  std::vector<std::string> devices;
  for (const SlotAssignment& s : slots) devices.push_back(DeviceIdToString(s.device));
  return devices;
}

TEST(InstanceGroupSlotsTest, CpuCountTilesTheCores) {
  inference::ModelConfig config =
      Parsed("name: \"m\" instance_group [ { count: 3 kind: KIND_CPU }, { kind: KIND_CPU } ]");
  absl::StatusOr<std::vector<SlotAssignment>> slots = InstanceGroupSlots(CpusAndGpu(), 1, &config);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_THAT(SlotDevices(*slots), ElementsAre("cpu:0", "cpu:1", "cpu:0", "cpu:1"));
  EXPECT_EQ((*slots)[3].name, "r3");
  EXPECT_EQ(config.instance_group(1).count(), 1);  // Unset count means 1.
  EXPECT_EQ(config.instance_group(1).name(), "m_1");
}

TEST(InstanceGroupSlotsTest, GpusMapToSlots) {
  inference::ModelConfig config =
      Parsed("instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] }, { kind: KIND_AUTO } ]");
  absl::StatusOr<std::vector<SlotAssignment>> slots = InstanceGroupSlots(CpusAndGpu(), 1, &config);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_THAT(SlotDevices(*slots), ElementsAre("cuda:0", "cuda:0", "cuda:0"));
  EXPECT_EQ(config.instance_group(1).kind(), ModelInstanceGroup::KIND_GPU);  // Resolved.
  EXPECT_THAT(config.instance_group(1).gpus(), ElementsAre(0));
}

TEST(InstanceGroupSlotsTest, RefusesAGpuTheMachineLacks) {
  inference::ModelConfig config = Parsed("instance_group [ { kind: KIND_GPU gpus: [ 0, 3 ] } ]");
  absl::StatusOr<std::vector<SlotAssignment>> slots = InstanceGroupSlots(CpusAndGpu(), 1, &config);
  EXPECT_EQ(slots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(slots.status().ToString(),
              AllOf(HasSubstr("instance_group[0].gpus"), HasSubstr("'cuda:3' does not exist"),
                    HasSubstr("cuda:0")));
}

TEST(InstanceGroupSlotsTest, RefusesKindGpuWithoutGpus) {
  std::vector<DeviceInfo> cpus = CpusAndGpu();
  cpus.pop_back();
  inference::ModelConfig config = Parsed("instance_group [ { kind: KIND_GPU } ]");
  absl::StatusOr<std::vector<SlotAssignment>> slots = InstanceGroupSlots(cpus, 1, &config);
  EXPECT_EQ(slots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(slots.status().ToString(),
              AllOf(HasSubstr("instance_group[0].kind"), HasSubstr("no GPU")));
  config = Parsed("instance_group [ { kind: KIND_AUTO count: 2 } ]");  // CPU here.
  EXPECT_THAT(SlotDevices(*InstanceGroupSlots(cpus, 1, &config)), ElementsAre("cpu:0", "cpu:1"));
}

TEST(InstanceGroupSlotsTest, NoGroupsLeaveTheDaemonsSlots) {
  inference::ModelConfig config;
  EXPECT_TRUE(InstanceGroupSlots(CpusAndGpu(), 1, &config)->empty());
}

class ApplyTensorConfigTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::shared_ptr<const Model>> Apply(const std::string& text) {
    return ApplyTensorConfig(model_, Parsed(text));
  }
  std::shared_ptr<const Model> model_ = testing::LoadOrDie(testing::TwoInputTwoOutputOnnx(), "m");
};

TEST_F(ApplyTensorConfigTest, AcceptsMatchingTensors) {
  absl::StatusOr<std::shared_ptr<const Model>> model = Apply(kTritonConfig);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->get(), model_.get());  // Nothing to narrow.
  EXPECT_TRUE(Apply("max_batch_size: 0 input [ { name: \"image\" dims: [ -1, 3, 6, 6 ] } ]").ok());
  EXPECT_TRUE(Apply("").ok());  // Tensors may be left out.
}

TEST_F(ApplyTensorConfigTest, RefusesWrongDataTypes) {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Apply("input [ { name: \"features\" data_type: TYPE_FP16 dims: [ -1, 5 ] } ]");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().ToString(),
              AllOf(HasSubstr("input[0] 'features' data_type"), HasSubstr("expected TYPE_FP32"),
                    HasSubstr("received TYPE_FP16")));
  model = Apply("output [ { name: \"sum\" data_type: TYPE_INT64 dims: [ -1, 2 ] } ]");
  EXPECT_THAT(model.status().ToString(),
              AllOf(HasSubstr("output[0] 'sum' data_type"), HasSubstr("received TYPE_INT64")));
}

TEST_F(ApplyTensorConfigTest, RefusesWrongDims) {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Apply("max_batch_size: 8 input [ { name: \"image\" dims: [ 3, 7, 6 ] } ]");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().ToString(),
              AllOf(HasSubstr("input[0] 'image' dims: expected [3,6,6]"),
                    HasSubstr("without the batch dimension"), HasSubstr("received [3,7,6]")));
  // With max_batch_size 0 the dims include the batch dimension, as in Triton.
  model = Apply("input [ { name: \"image\" dims: [ 3, 6, 6 ] } ]");
  EXPECT_THAT(model.status().ToString(),
              AllOf(HasSubstr("expected [-1,3,6,6]"), HasSubstr("received [3,6,6]")));
  model = Apply("max_batch_size: 8 output [ { name: \"sum\" dims: [ 0 ] } ]");
  EXPECT_THAT(model.status().ToString(), HasSubstr("output[0] 'sum' dims"));
}

TEST_F(ApplyTensorConfigTest, RefusesATensorTheModelLacks) {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Apply("input [ { name: \"pixels\" dims: [ 1 ] } ]");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().ToString(),
              AllOf(HasSubstr("input[0] 'pixels'"), HasSubstr("image, features")));
}

TEST(ApplyTensorConfigOpenDimTest, FixedDimsNarrowTheSignature) {
  std::shared_ptr<const Model> open = testing::LoadOrDie(OpenDimOnnx(), "open");
  inference::ModelConfig config =
      Parsed("max_batch_size: 8 input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 4 ] } ]");
  absl::StatusOr<std::shared_ptr<const Model>> model = ApplyTensorConfig(open, config);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT((*model)->inputs()[0].type.shape, ElementsAre(kAnyDim, 4));
  EXPECT_THAT(open->inputs()[0].type.shape, ElementsAre(kAnyDim, kAnyDim));
}

TEST(ApplyTensorConfigOpenDimTest, RefusesBatchingAModelThatDoesNotBatch) {
  std::shared_ptr<const Model> fixed = testing::LoadOrDie(FixedBatchOnnx(), "fixed");
  absl::StatusOr<std::shared_ptr<const Model>> model =
      ApplyTensorConfig(fixed, Parsed("max_batch_size: 8"));
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().ToString(), AllOf(HasSubstr("max_batch_size: expected 0"),
                                               HasSubstr("input 'x'"), HasSubstr("received 8")));
  EXPECT_TRUE(ApplyTensorConfig(fixed, Parsed("input [ { name: \"x\" dims: [ 2, 4 ] } ]")).ok());
}

// docs/model-repositories.md lists exactly the fields accepted without being honoured.
TEST(HarmlessConfigFieldsTest, TheDocsListThem) {
  const char* source_dir = std::getenv("REPLICAD_SOURCE_DIR");
  if (source_dir == nullptr) GTEST_SKIP() << "REPLICAD_SOURCE_DIR is not set (ctest sets it)";
  std::ifstream file(fs::path(source_dir) / "docs" / "model-repositories.md");
  std::stringstream readme;
  readme << file.rdbuf();
  for (const std::string& field : HarmlessConfigFields()) {
    EXPECT_THAT(readme.str(), HasSubstr(absl::StrCat("`", field, "`"))) << field;
  }
}

// A Triton-layout repository loaded through the daemon's repository.
class TritonRepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int version : {1, 2}) {
      WriteFile(dir_ / "m" / std::to_string(version) / "model.onnx",
                testing::TwoInputTwoOutputOnnx());
    }
    WriteFile(dir_ / "plain" / "1" / "model.onnx", testing::TwoInputTwoOutputOnnx());
    WriteFile(dir_ / "plain" / "2" / "model.onnx", testing::TwoInputTwoOutputOnnx());
    absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    LocalModelRepository::Config config;
    config.directory = dir_.string();
    config.devices = *devices;
    config.options.slots = {SlotAssignment{"r0", DeviceId{DeviceKind::kCpu, 0}, 1.0}};
    config.options.max_batch_size = 64;
    config.options.scheduling.max_queue_delay = absl::Microseconds(30);
    config.options.scheduling.max_queue_bytes = 4096;
    repository_ = std::make_unique<LocalModelRepository>(config);
  }
  void WriteConfig(const std::string& text) { WriteFile(dir_ / "m" / "config.pbtxt", text); }
  std::string Fingerprint(const std::string& name) {
    absl::StatusOr<std::vector<ModelRepository::Entry>> entries = repository_->List();
    EXPECT_TRUE(entries.ok()) << entries.status();
    for (const ModelRepository::Entry& e : *entries) {
      if (e.name == name) return e.fingerprint;
    }
    return "";
  }

  const fs::path dir_ = TestDir();
  std::unique_ptr<LocalModelRepository> repository_;
};

TEST_F(TritonRepositoryTest, LoadsVersionsSlotsAndMaxBatchSizeFromTheConfig) {
  WriteConfig(kTritonConfig);
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> loaded = repository_->Load("m");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const LoadedModel& model = *(*loaded)[i];
    EXPECT_EQ(model.version, i + 1);
    EXPECT_EQ(model.max_batch_size, 8);
    EXPECT_EQ(model.servable->Slots().size(), 2u);  // count 2, KIND_CPU.
    inference::ModelConfig reported;
    FillModelConfig(model, &reported);
    EXPECT_EQ(reported.max_batch_size(), 8);
    ASSERT_EQ(reported.instance_group_size(), 1);
    EXPECT_EQ(reported.instance_group(0).count(), 2);
    EXPECT_EQ(reported.instance_group(0).kind(), ModelInstanceGroup::KIND_CPU);
    EXPECT_TRUE(reported.version_policy().has_all());
    EXPECT_THAT(reported.dynamic_batching().preferred_batch_size(), ElementsAre(4, 8));
    EXPECT_EQ(reported.backend(), "onnxruntime");
    EXPECT_TRUE(model.scheduling.dynamic_batching);
    EXPECT_EQ(model.scheduling.max_batch_size, 8);
    EXPECT_THAT(model.scheduling.preferred_batch_sizes, ElementsAre(4, 8));
    EXPECT_EQ(model.scheduling.max_queue_delay, absl::Microseconds(100));
    EXPECT_FALSE(model.scheduling.default_queue_policy.allow_timeout_override);
    EXPECT_EQ(model.scheduling.max_queue_bytes, 4096u);  // The daemon's.
    ASSERT_EQ(reported.output_size(), 2);
    EXPECT_THAT(reported.output(1).dims(), ElementsAre(-1));  // As the file has it.
  }
}

TEST_F(TritonRepositoryTest, ConfigWithoutTensorsIsCompletedFromTheModel) {
  WriteConfig("version_policy { specific { versions: [ 1 ] } } max_batch_size: 4");
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> loaded = repository_->Load("m");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0]->version, 1);
  EXPECT_EQ((*loaded)[0]->servable->Slots().size(), 1u);  // The daemon's slots.
  inference::ModelConfig reported;
  FillModelConfig(*(*loaded)[0], &reported);
  ASSERT_EQ(reported.input_size(), 2);
  EXPECT_EQ(reported.input(0).name(), "image");
  EXPECT_THAT(reported.input(0).dims(), ElementsAre(3, 6, 6));
  EXPECT_EQ(reported.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(reported.instance_group(0).count(), 1);
}

TEST_F(TritonRepositoryTest, WithoutAConfigTheLatestVersionServesWithTheDaemonsOptions) {
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> loaded = repository_->Load("plain");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0]->version, 2);
  EXPECT_EQ((*loaded)[0]->max_batch_size, 64);
  EXPECT_TRUE((*loaded)[0]->config_text.empty());
  const SchedulerOptions& scheduling = (*loaded)[0]->scheduling;
  EXPECT_TRUE(scheduling.dynamic_batching);
  EXPECT_EQ(scheduling.max_batch_size, 64);
  EXPECT_EQ(scheduling.max_queue_delay, absl::Microseconds(30));
  EXPECT_TRUE(scheduling.default_queue_policy.allow_timeout_override);
  EXPECT_EQ(scheduling.max_queue_bytes, 4096u);
}

// A configuration without a batch dimension keeps the daemon's limit on dim 0,
// and the scheduler is told the same limit.
TEST_F(TritonRepositoryTest, MaxBatchSizeZeroSchedulesWithTheDaemonsLimit) {
  WriteConfig("dynamic_batching {}");
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> loaded = repository_->Load("m");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const LoadedModel& model = *loaded->back();
  EXPECT_EQ(model.max_batch_size, 64);
  EXPECT_EQ(model.scheduling.max_batch_size, 64);
  EXPECT_FALSE(model.scheduling.dynamic_batching);
  EXPECT_EQ(model.scheduling.max_queue_delay, absl::ZeroDuration());  // Triton's, not the daemon's.
}

TEST_F(TritonRepositoryTest, InvalidDynamicBatchingNamesTheConfig) {
  WriteConfig(
      "max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 5 }");
  absl::Status status = repository_->Load("m").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.ToString(), AllOf(HasSubstr("model 'm'"), HasSubstr("m/config.pbtxt"),
                                       HasSubstr("dynamic_batching.default_priority_level")));
}

TEST_F(TritonRepositoryTest, AnUnsupportedFieldIsRefusedByName) {
  WriteConfig("max_batch_size: 8\nsequence_batching { max_sequence_idle_microseconds: 5 }\n");
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> loaded = repository_->Load("m");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().ToString(), AllOf(HasSubstr("model 'm'"), HasSubstr("m/config.pbtxt"),
                                                HasSubstr("'sequence_batching' is not supported")));
}

TEST_F(TritonRepositoryTest, ModelErrorsNameTheConfig) {
  WriteConfig("input [ { name: \"image\" dims: [ 1, 2 ] } ]");
  EXPECT_THAT(
      repository_->Load("m").status().ToString(),
      AllOf(HasSubstr("m/config.pbtxt: input[0] 'image' dims"), HasSubstr("received [1,2]")));
  WriteConfig("version_policy { specific { versions: [ 3 ] } }");
  EXPECT_THAT(repository_->Load("m").status().ToString(),
              HasSubstr("version 3 is not in the repository; it has 1, 2"));
}

TEST_F(TritonRepositoryTest, TheFingerprintFollowsTheConfig) {
  const std::string without = Fingerprint("m");
  WriteConfig("max_batch_size: 8");
  const std::string with = Fingerprint("m");
  EXPECT_NE(with, without);
  WriteConfig("max_batch_size: 16");
  EXPECT_NE(Fingerprint("m"), with);
  fs::remove(dir_ / "m" / "config.pbtxt");
  EXPECT_EQ(Fingerprint("m"), without);
}

}  // namespace
}  // namespace replicad
