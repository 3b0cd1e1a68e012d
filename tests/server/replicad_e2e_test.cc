// Starts the real daemon and drives it through the client library and
// replicactl: the model, the split, every bad-input case, metrics, shutdown.
//
// Covered: every bad-input case of docs/api.md, the message limit, concurrent clients, live
// /metrics through promtool, and SIGTERM draining requests in flight with exit code 0.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/npy.h"
#include "client/replicad_client.h"
#include "core/model/default_model.h"
#include "core/model/onnx_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/proto_tensors.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using testing::DaemonProcess;
using testing::FromProto;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ToProto;

v1::PredictRequest ImageRequest(int64_t batch, uint64_t seed) {
  v1::PredictRequest request;
  request.set_model("default");
  *request.add_inputs() = ToProto("image", testing::RandomTensor({batch, 1, 28, 28}, seed));
  return request;
}

class ReplicadE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> started =
        DaemonProcess::Start({"--devices", "cpu:0,cpu:0,cpu:0", "--max-batch-size", "256",
                              "--max-message-bytes", std::to_string(4 << 20)});
    ASSERT_TRUE(started.ok()) << started.status();
    daemon_ = started->release();
    client::ClientOptions options;
    options.max_message_bytes = 64 << 20;  // Bigger than the server's, to test its limit.
    client_ = client::ReplicadClient::Connect(daemon_->target(), options)->release();
    // The in-process reference: the same embedded model on one slot.
    reference_ = testing::MakeCpuReplicaSet(*LoadDefaultModel(), {1}).release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete reference_;
    delete daemon_;
  }

  // A request that must succeed, proving earlier bad requests disturbed nothing.
  static void ExpectServingStillWorks() {
    absl::StatusOr<v1::PredictResponse> ok = client_->Predict(ImageRequest(5, 77));
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->outputs_size(), 2);
  }

  static absl::Status PredictError(const v1::PredictRequest& request) {
    absl::StatusOr<v1::PredictResponse> response = client_->Predict(request);
    EXPECT_FALSE(response.ok());
    return response.status();
  }

  static DaemonProcess* daemon_;
  static client::ReplicadClient* client_;
  static ReplicaSet* reference_;
};

DaemonProcess* ReplicadE2eTest::daemon_ = nullptr;
client::ReplicadClient* ReplicadE2eTest::client_ = nullptr;
ReplicaSet* ReplicadE2eTest::reference_ = nullptr;

TEST_F(ReplicadE2eTest, PredictRunsTheBatchOnItsSlotsAndMatchesOneSlot) {
  for (int64_t batch : {1, 2, 7, 64}) {
    v1::PredictRequest request = ImageRequest(batch, batch);
    absl::StatusOr<v1::PredictResponse> response = client_->Predict(request);
    ASSERT_TRUE(response.ok()) << response.status();
    // Whole on one slot or split, as the scheduler's measured speeds say.
    EXPECT_GE(response->slices_size(), 1);
    EXPECT_LE(response->slices_size(), std::min<int64_t>(batch, 3));
    int64_t next = 0;
    for (const v1::SliceInfo& slice : response->slices()) {
      EXPECT_EQ(slice.begin(), next);
      EXPECT_EQ(slice.device(), "cpu:0");
      next = slice.end();
    }
    EXPECT_EQ(next, batch);
    testing::PredictOutcome expected =
        testing::PredictAndWait(*reference_, {FromProto(request.inputs(0))});
    ASSERT_TRUE(expected.status.ok());
    ASSERT_EQ(response->outputs_size(), 2);
    EXPECT_EQ(response->outputs(0).name(), "logits");
    EXPECT_EQ(response->outputs(1).name(), "probabilities");
    for (int j = 0; j < 2; ++j) {
      Tensor got = FromProto(response->outputs(j));
      EXPECT_EQ(got.shape(), (Shape{batch, 10}));
      EXPECT_LE(testing::RelativeL2(got, expected.outputs[j]), 1e-6);
    }
  }
}

// The client that sends its inputs as borrowed slices gets the typed
// client's answer; bytes protobuf would refuse are INVALID_ARGUMENT on both
// raw doors (Predict and the Open Inference Protocol's ModelInfer), and the
// daemon serves on.
TEST_F(ReplicadE2eTest, BorrowingClientAndMalformedRequestBytes) {
  v1::PredictRequest request = ImageRequest(6, 3);
  absl::StatusOr<v1::PredictResponse> typed = client_->Predict(request);
  absl::StatusOr<v1::PredictResponse> borrowing = client_->PredictBorrowingInputs(request);
  ASSERT_TRUE(typed.ok()) << typed.status();
  ASSERT_TRUE(borrowing.ok()) << borrowing.status();
  ASSERT_EQ(borrowing->outputs_size(), 2);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(borrowing->outputs(j).name(), typed->outputs(j).name());
    EXPECT_LE(testing::RelativeL2(FromProto(borrowing->outputs(j)), FromProto(typed->outputs(j))),
              1e-6);
  }

  grpc::GenericStub stub(
      grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials()));
  for (const char* method :
       {"/replicad.v1.Replicad/Predict", "/inference.GRPCInferenceService/ModelInfer"}) {
    SCOPED_TRACE(method);
    const std::string bytes = "\x0a\x01m\x12\x80";  // A name, then a truncated length.
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer wire(&slice, 1), reply;
    grpc::ClientContext context;
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &wire, &reply, [&](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), AllOf(HasSubstr("request is not a valid "),
                                              HasSubstr("truncated length at byte 4")));
  }
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, OutputNamesSelectOutputs) {
  v1::PredictRequest request = ImageRequest(3, 1);
  request.add_output_names("probabilities");
  absl::StatusOr<v1::PredictResponse> response = client_->Predict(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->outputs_size(), 1);
  EXPECT_EQ(response->outputs(0).name(), "probabilities");

  request.set_output_names(0, "nope");
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("output_names[0]"), HasSubstr("no output 'nope'")));
}

TEST_F(ReplicadE2eTest, ListsDevicesModelsAndTheModel) {
  absl::StatusOr<v1::ListDevicesResponse> devices = client_->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_GE(devices->devices_size(), 1);
  EXPECT_EQ(devices->devices(0).id(), "cpu:0");
  EXPECT_EQ(devices->devices(0).kind(), "cpu");
  EXPECT_EQ(devices->devices(0).slots(), 3);
  EXPECT_GT(devices->devices(0).memory_bytes(), 0u);

  absl::StatusOr<v1::ListModelsResponse> models = client_->ListModels();
  ASSERT_TRUE(models.ok());
  ASSERT_EQ(models->models_size(), 1);
  EXPECT_EQ(models->models(0).name(), "default");
  EXPECT_EQ(models->models(0).path(), "<embedded>");

  absl::StatusOr<v1::ModelInfo> model = client_->GetModel("default");
  ASSERT_TRUE(model.ok());
  ASSERT_EQ(model->inputs_size(), 1);
  EXPECT_EQ(model->inputs(0).name(), "image");
  EXPECT_THAT(model->inputs(0).shape(), ::testing::ElementsAre(-1, 1, 28, 28));
  EXPECT_EQ(model->replicas_size(), 3);
  EXPECT_EQ(model->replicas(2).slot(), "r2");
  EXPECT_TRUE(model->replicas(2).healthy());
  EXPECT_EQ(model->replicas(2).fault(), "");
  EXPECT_TRUE(model->ready());
  EXPECT_EQ(model->merge_device(), "cpu:0");
  EXPECT_EQ(model->max_batch_size(), 256);

  absl::StatusOr<v1::ModelInfo> missing = client_->GetModel("resnet");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("'resnet' is not served; served models: default"));
}

// One test per bad-input case: the code, a message naming the field with the
// expected and received values, and the daemon serving normally afterwards.
TEST_F(ReplicadE2eTest, UnknownModel) {
  v1::PredictRequest request = ImageRequest(2, 1);
  request.set_model("mnist");
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model: 'mnist' is not served; served models: default"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, UnknownInput) {
  v1::PredictRequest request = ImageRequest(2, 1);
  request.mutable_inputs(0)->set_name("img");
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("inputs[0].name"), HasSubstr("no input 'img'"),
                                 HasSubstr("image float32[?,1,28,28]")));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, MissingInput) {
  v1::PredictRequest request;
  request.set_model("default");
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("input 'image' is missing"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, DuplicatedInput) {
  v1::PredictRequest request = ImageRequest(2, 1);
  *request.add_inputs() = request.inputs(0);
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("inputs[1].name: input 'image' is already given as inputs[0]"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, WrongDtype) {
  v1::PredictRequest request = ImageRequest(2, 1);
  request.mutable_inputs(0)->set_dtype(v1::DATA_TYPE_INT64);
  request.mutable_inputs(0)->mutable_raw()->resize(2 * 28 * 28 * 8);
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("inputs[0] 'image': dtype expected float32, received int64"));

  request.mutable_inputs(0)->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("received DATA_TYPE_UNSPECIFIED (0)"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, WrongRank) {
  v1::PredictRequest request = ImageRequest(2, 1);
  request.mutable_inputs(0)->clear_shape();
  for (int64_t d : {2, 28, 28}) request.mutable_inputs(0)->add_shape(d);
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("inputs[0] 'image'"), HasSubstr("expected rank 4"),
                                 HasSubstr("received rank 3")));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, WrongNonBatchDimension) {
  v1::PredictRequest request = ImageRequest(2, 1);
  request.mutable_inputs(0)->set_shape(2, 14);
  request.mutable_inputs(0)->set_shape(3, 56);
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("dim 2 expected 28, received 14"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, ByteCountNotMatchingShape) {
  v1::PredictRequest request = ImageRequest(2, 1);
  request.mutable_inputs(0)->mutable_raw()->resize(100);
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("raw holds 100 bytes; float32[2,1,28,28] needs 6272"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, EmptyBatch) {
  v1::PredictRequest request = ImageRequest(2, 1);
  request.mutable_inputs(0)->set_shape(0, 0);
  request.mutable_inputs(0)->clear_raw();
  absl::Status s = PredictError(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the batch is empty"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, BatchOverTheConfiguredMaximum) {
  absl::Status s = PredictError(ImageRequest(257, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("batch size 257 exceeds the maximum of 256"));
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, RequestOverTheMessageLimitIsResourceExhausted) {
  // 2000 images of 3136 bytes: ~6 MiB, over the daemon's 4 MiB limit.
  absl::Status s = PredictError(ImageRequest(2000, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  ExpectServingStillWorks();
}

TEST_F(ReplicadE2eTest, ConcurrentClientsAllGetAnswers) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        if (client_->Predict(ImageRequest(1 + (t + i) % 9, t * 100 + i)).ok()) ++ok;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 60);
}

TEST_F(ReplicadE2eTest, ReplicactlPredictWritesNpyOutputs) {
  const std::string dir = ::testing::TempDir() + "/replicactl_e2e";
  std::filesystem::create_directories(dir);
  v1::PredictRequest request = ImageRequest(4, 9);
  ASSERT_TRUE(client::WriteNpy(dir + "/image.npy", request.inputs(0)).ok());
  testing::CommandResult result = testing::RunCommand(
      {testing::BinDir() + "/replicactl", "--server", daemon_->target(), "predict", "--model",
       "default", "--input", "image=" + dir + "/image.npy", "--output-dir", dir + "/out"});
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_THAT(result.out, HasSubstr("probabilities"));
  absl::StatusOr<v1::Tensor> probabilities = client::ReadNpy(dir + "/out/probabilities.npy");
  ASSERT_TRUE(probabilities.ok()) << probabilities.status();
  absl::StatusOr<v1::PredictResponse> direct = client_->Predict(request);
  ASSERT_TRUE(direct.ok());
  EXPECT_THAT(probabilities->shape(), ::testing::ElementsAre(4, 10));
  // The two Predicts may split the 4 rows differently over the 3 slots (the
  // shares follow measured speeds), and a slice's size picks its kernels'
  // blocking: the last bits may differ. 1e-6 on probabilities in [0, 1].
  const std::string& written = probabilities->raw();
  const std::string& served = direct->outputs(1).raw();
  ASSERT_EQ(written.size(), served.size());
  ASSERT_EQ(written.size(), 40 * sizeof(float));
  for (size_t i = 0; i < 40; ++i) {
    float a, b;
    std::memcpy(&a, written.data() + i * sizeof(float), sizeof(float));
    std::memcpy(&b, served.data() + i * sizeof(float), sizeof(float));
    EXPECT_NEAR(a, b, 1e-6) << "probability " << i;
  }
}

TEST_F(ReplicadE2eTest, ReplicactlListsAndReportsErrors) {
  const std::string ctl = testing::BinDir() + "/replicactl";
  testing::CommandResult models =
      testing::RunCommand({ctl, "--server", daemon_->target(), "models"});
  EXPECT_EQ(models.exit_code, 0) << models.out;
  EXPECT_THAT(models.out, HasSubstr("default"));
  testing::CommandResult devices =
      testing::RunCommand({ctl, "--server", daemon_->target(), "devices"});
  EXPECT_EQ(devices.exit_code, 0) << devices.out;
  EXPECT_THAT(devices.out, HasSubstr("cpu:0"));
  testing::CommandResult model =
      testing::RunCommand({ctl, "--server", daemon_->target(), "model", "default"});
  EXPECT_EQ(model.exit_code, 0) << model.out;
  EXPECT_THAT(model.out, AllOf(HasSubstr("image"), HasSubstr("r2")));
  testing::CommandResult missing =
      testing::RunCommand({ctl, "--server", daemon_->target(), "model", "nope"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.out, HasSubstr("NOT_FOUND"));
}

TEST_F(ReplicadE2eTest, MetricsCountRequestsAndSlotsAndPassPromtool) {
  ASSERT_TRUE(client_->Predict(ImageRequest(6, 3)).ok());
  absl::StatusOr<std::string> response = testing::HttpGet(daemon_->metrics_port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(*response, HasSubstr("200 OK"));
  EXPECT_THAT(
      *response,
      AllOf(
          HasSubstr("replicad_requests_total{model=\"default\",method=\"Predict\",code=\"OK\"}"),
          HasSubstr("replicad_request_duration_seconds_bucket{model=\"default\",method=\"Predict\","
                    "le=\"+Inf\"}"),
          HasSubstr("replicad_slot_samples_total{model=\"default\",slot=\"r2\",device=\"cpu:0\"}"),
          HasSubstr("replicad_slot_busy_seconds_total"),
          HasSubstr("replicad_samples_total{model=\"default\"}"),
          HasSubstr("replicad_device_slots{device=\"cpu:0\"} 3")));
  const size_t body = response->find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  const std::string file = ::testing::TempDir() + "/live_metrics.txt";
  std::ofstream(file) << response->substr(body + 4);
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "no promtool";
  testing::CommandResult check =
      testing::RunCommand({"/bin/sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(check.exit_code, 0) << check.out;
}

constexpr int64_t kSlowWidth = 512;
constexpr int64_t kSlowOutputs = 8;

// x float32[N,512] through 16 (or `layers`) MatMul + Relu layers of 512x512 (He-scaled, so
// values stay near 1), then a MatMul to y float32[N,8]: about 8 MFLOP a row
// and little memory, so a request of a few thousand rows keeps one
// single-threaded slot busy for a good part of a second (the default model
// would need gigabytes of activations for that). The answers stay small
// (64 KB for 2048 rows): the daemon shuts gRPC down as soon as its last
// request's answer is handed over, and an answer of megabytes still being
// written then is cut off (UNAVAILABLE "Cancelling all calls"; 4 runs in 10
// with y [N,512]), which this test would report as a failure every so often.
std::string SlowModelOnnx(int layers = 16) {
  OnnxModelBuilder builder("slow_mlp");
  std::string in = "x";
  for (int i = 0; i <= layers; ++i) {
    const std::string layer = "layer" + std::to_string(i);
    const int64_t width = i < layers ? kSlowWidth : kSlowOutputs;
    Tensor weight = testing::RandomTensor({kSlowWidth, width}, 100 + i);
    const float scale = std::sqrt(6.0f / kSlowWidth);
    for (int64_t j = 0; j < weight.num_elements(); ++j) weight.data<float>()[j] *= scale;
    builder.AddInitializer(layer + ".weight", weight);
    if (i == layers) {
      builder.AddNode("MatMul", {in, layer + ".weight"}, {"y"});
      break;
    }
    builder.AddNode("MatMul", {in, layer + ".weight"}, {layer + ".matmul"});
    builder.AddNode("Relu", {layer + ".matmul"}, {layer + ".relu"});
    in = layer + ".relu";
  }
  builder.AddInput("x", DType::kFloat32, {kAnyDim, kSlowWidth});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, kSlowOutputs});
  return builder.Serialize();
}

v1::PredictRequest SlowRequest(int64_t rows, uint64_t seed) {
  v1::PredictRequest request;
  request.set_model("slow");
  *request.add_inputs() = ToProto("x", testing::RandomTensor({rows, kSlowWidth}, seed));
  return request;
}

// The value of `series` (its name with its labels, as exposed) on the
// daemon's /metrics; 0 before the series exists.
double MetricValue(int port, const std::string& series) {
  absl::StatusOr<std::string> page = testing::HttpGet(port, "/metrics");
  EXPECT_TRUE(page.ok()) << page.status();
  if (!page.ok()) return 0;
  const std::string needle = "\n" + series + " ";
  const size_t at = page->find(needle);
  return at == std::string::npos ? 0 : std::strtod(page->c_str() + at + needle.size(), nullptr);
}

// One Predict on a thread of its own; `answered` is set once its answer is back.
struct BackgroundPredict {
  ~BackgroundPredict() {
    if (thread.joinable()) thread.join();  // After a failed ASSERT too.
  }

  v1::PredictRequest request;
  absl::StatusOr<v1::PredictResponse> response;
  std::atomic<bool> answered{false};
  absl::Time answered_at;
  std::thread thread;

  void Start(client::ReplicadClient* client) {
    thread = std::thread([this, client] {
      response = client->Predict(request);
      answered_at = absl::Now();
      answered = true;
    });
  }
};

// Two requests are provably in flight when SIGTERM is sent: the daemon has
// handed both to the only slot (its counter of dispatched requests says so;
// without dynamic batching a slot takes a second request while it runs the
// first), and neither has been answered. Both must then be answered OK, after
// the signal, with the outputs of an in-process reference; a daemon that
// cancelled or dropped work in flight answers them CANCELLED or UNAVAILABLE
// instead (as it does with --shutdown-grace-seconds 0). A request sent after
// the signal is refused or, had it reached the server before the drain began,
// answered in full: never half-answered.
TEST(ReplicadShutdownTest, SigtermFinishesInFlightRequestsAndExitsZero) {
  const std::string model_path = ::testing::TempDir() + "/slow_mlp.onnx";
  const std::string onnx = SlowModelOnnx();
  std::ofstream(model_path, std::ios::binary) << onnx;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      {"--model", "slow=" + model_path, "--devices", "cpu:0", "--threads-per-slot", "1",
       "--no-dynamic-batching", "--shutdown-grace-seconds", "120"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  client::ClientOptions options;
  options.deadline = absl::Seconds(300);
  auto client = *client::ReplicadClient::Connect((*daemon)->target(), options);
  ASSERT_TRUE(client->Predict(SlowRequest(1, 1)).ok());

  const int port = (*daemon)->metrics_port();
  const std::string dispatched = R"(replicad_batched_requests_total{model="slow"})";
  const double dispatched_before = MetricValue(port, dispatched);
  constexpr int64_t kRows = 2048;  // About 17 GFLOP: 0.1 s at the very least.
  BackgroundPredict first, second;
  first.request = SlowRequest(kRows, 2);
  second.request = SlowRequest(kRows, 3);
  first.Start(client.get());
  second.Start(client.get());
  // Only these two requests exist, so the counter reaching +2 means both run
  // or wait on the slot.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (MetricValue(port, dispatched) < dispatched_before + 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_GE(MetricValue(port, dispatched), dispatched_before + 2)
      << "the two requests were not dispatched within 60 s";
  ASSERT_FALSE(first.answered.load() || second.answered.load())
      << "a request finished before the signal: the slow model is too fast for this machine";

  const absl::Time signalled = absl::Now();
  int exit_code = -1;
  std::thread stopper([&] { exit_code = (*daemon)->StopWith(SIGTERM); });
  // Knock once the daemon has surely begun draining (the two requests take
  // far longer than that).
  absl::SleepFor(absl::Milliseconds(50));
  absl::StatusOr<v1::PredictResponse> late = client->Predict(SlowRequest(4, 4));
  stopper.join();
  first.thread.join();
  second.thread.join();

  EXPECT_EQ(exit_code, 0) << (*daemon)->output();
  EXPECT_THAT((*daemon)->output(), HasSubstr("replicad: stopped"));
  EXPECT_THAT((*daemon)->output(), Not(HasSubstr("grace period over")));
  std::unique_ptr<ReplicaSet> reference =
      testing::MakeCpuReplicaSet(testing::LoadOrDie(onnx, "slow"), {1});
  for (BackgroundPredict* call : {&first, &second}) {
    SCOPED_TRACE(call == &first ? "first request" : "second request");
    ASSERT_TRUE(call->response.ok()) << call->response.status();
    EXPECT_GT(call->answered_at, signalled);
    ASSERT_EQ(call->response->outputs_size(), 1);
    Tensor got = FromProto(call->response->outputs(0));
    EXPECT_EQ(got.shape(), (Shape{kRows, kSlowOutputs}));
    testing::PredictOutcome expected =
        testing::PredictAndWait(*reference, {FromProto(call->request.inputs(0))});
    ASSERT_TRUE(expected.status.ok()) << expected.status;
    EXPECT_LE(testing::RelativeL2(got, expected.outputs[0]), 1e-6);
  }
  if (late.ok()) {
    EXPECT_EQ(late->outputs(0).raw().size(), 4u * kSlowOutputs * 4);
  } else {
    EXPECT_TRUE(late.status().code() == absl::StatusCode::kUnavailable ||
                late.status().code() == absl::StatusCode::kCancelled)
        << late.status();
  }
}

// Past the grace period nothing in flight keeps the daemon: queued requests
// are answered without running and running batches stop at their next
// kernel, so it exits within the grace period plus 2 s (the bound below),
// however long its batches would still have run. (Kubernetes kills a pod 30
// s after SIGTERM by default; a batch of a large model on a CPU runs longer
// than that.) Four clients flood one single-threaded slot with requests of
// several seconds each (16384 rows through 64 layers: 550 GFLOP), two fused
// to a batch, so a batch runs, others wait, and more arrive as SIGTERM comes.
TEST(ReplicadShutdownTest, PastTheGracePeriodRunningBatchesStopAndTheDaemonExitsInTime) {
  const std::string model_path = ::testing::TempDir() + "/slower_mlp.onnx";
  std::ofstream(model_path, std::ios::binary) << SlowModelOnnx(64);
  constexpr int kGraceSeconds = 1;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      {"--model", "slow=" + model_path, "--devices", "cpu:0", "--threads-per-slot", "1",
       "--max-batch-size", "32768", "--shutdown-grace-seconds", std::to_string(kGraceSeconds)});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  client::ClientOptions options;
  options.deadline = absl::Seconds(300);
  auto client = *client::ReplicadClient::Connect((*daemon)->target(), options);
  ASSERT_TRUE(client->Predict(SlowRequest(1, 1)).ok());

  const int port = (*daemon)->metrics_port();
  const std::string dispatched = R"(replicad_batched_requests_total{model="slow"})";
  const double dispatched_before = MetricValue(port, dispatched);
  constexpr int kClients = 4;
  std::atomic<int> answered_ok{0};
  std::vector<absl::Status> failures(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      // Until the daemon stops answering: a request sent after the signal is
      // refused, one in flight is stopped.
      for (uint64_t seed = 10 * c;; ++seed) {
        absl::StatusOr<v1::PredictResponse> response = client->Predict(SlowRequest(16384, seed));
        if (!response.ok()) {
          failures[c] = response.status();
          return;
        }
        ++answered_ok;
      }
    });
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (MetricValue(port, dispatched) < dispatched_before + 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(MetricValue(port, dispatched), dispatched_before + 1)
      << "no request was dispatched within 60 s";
  absl::SleepFor(absl::Milliseconds(300));  // Well into the first batch.
  ASSERT_EQ(answered_ok.load(), 0)
      << "a request finished before the signal: the slow model is too fast for this machine";

  const absl::Time signalled = absl::Now();
  const int exit_code = (*daemon)->StopWith(SIGTERM);
  const absl::Duration exit_took = absl::Now() - signalled;
  for (std::thread& t : clients) t.join();

  EXPECT_LE(exit_took, absl::Seconds(kGraceSeconds + 2)) << (*daemon)->output();
  EXPECT_EQ(exit_code, 0) << (*daemon)->output();
  EXPECT_THAT((*daemon)->output(), HasSubstr("grace period over"));
  EXPECT_THAT((*daemon)->output(), HasSubstr("replicad: stopped"));
  for (int c = 0; c < kClients; ++c) {
    EXPECT_TRUE(failures[c].code() == absl::StatusCode::kUnavailable ||
                failures[c].code() == absl::StatusCode::kCancelled)
        << "client " << c << ": " << failures[c];
  }
  std::cout << "exited " << absl::FormatDuration(exit_took) << " after SIGTERM (grace "
            << kGraceSeconds << " s); requests answered in full before: " << answered_ok.load()
            << std::endl;
}

TEST(ReplicadStartupTest, UnknownDeviceFailsListingTheDevicesThatExist) {
  testing::CommandResult result =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--devices", "cpu:0,cuda:7"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.out,
              AllOf(HasSubstr("'cuda:7' does not exist"), HasSubstr("available: cpu:0")));
}

TEST(ReplicadStartupTest, BadMergeDeviceAndTransferChunksFailNamingTheFlag) {
  testing::CommandResult merge =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--merge-device", "cuda:7"});
  EXPECT_EQ(merge.exit_code, 1);
  EXPECT_THAT(merge.out, AllOf(HasSubstr("--merge-device: device 'cuda:7' does not exist"),
                               HasSubstr("available: cpu:0")));
  testing::CommandResult chunks =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--transfer-chunks", "0"});
  EXPECT_EQ(chunks.exit_code, 1);
  EXPECT_THAT(chunks.out, HasSubstr("--transfer-chunks must be >= 1; received 0"));
}

TEST(ReplicadStartupTest, BadSchedulingAndDoorFlagsFailNamingTheFlag) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"--max-queue-delay-us", "-1"}, "--max-queue-delay-us must be >= 0; received -1"},
      {{"--preferred-batch-sizes", "4,x"},
       "--preferred-batch-sizes entry 1 is 'x'; expected a positive integer"},
      {{"--max-batch-size", "8", "--preferred-batch-sizes", "4,16"},
       "--preferred-batch-sizes entry 1 is 16; expected at most 8 (--max-batch-size)"},
      {{"--max-queue-size", "-1"}, "--max-queue-size must be 0 (no bound) to 4294967295"},
      {{"--max-queue-bytes", "-1"}, "--max-queue-bytes must be >= 0 (0: no bound); received -1"},
      {{"--slot-weights", "1,x", "--devices", "cpu:0,cpu:0"},
       "--slot-weights entry 1 is 'x'; expected a positive number"},
      {{"--grpc-buffer-pool-bytes", "-1"},
       "--grpc-buffer-pool-bytes must be >= 0 (0: none kept); received -1"},
      {{"--plan-memory-per-slot", "-5"}, "--plan-memory-per-slot must be >= 0 bytes; received -5"},
      {{"--http-listen", "127.0.0.1:0", "--http-threads", "0"},
       "--http-threads must be >= 1; received 0"},
      {{"--http-listen", "unix:/tmp/replicad.http.sock"},
       "--http-listen: expected HOST:PORT (Unix sockets serve gRPC only, --listen unix:PATH); "
       "received unix:/tmp/replicad.http.sock"},
      {{"--metrics-listen", "unix-abstract:replicad"},
       "--metrics-listen: expected HOST:PORT (Unix sockets serve gRPC only"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> command = {testing::BinDir() + "/replicad", "serve", "--listen",
                                        "127.0.0.1:0"};
    command.insert(command.end(), flags.begin(), flags.end());
    testing::CommandResult result = testing::RunCommand(command);
    EXPECT_EQ(result.exit_code, 1) << message;
    EXPECT_THAT(result.out, AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr(message)));
  }
}

TEST(ReplicadStartupTest, UnsupportedModelFailsNamingOpsAndNodes) {
  const std::string dir = ::testing::TempDir() + "/bad_repo/lstm";
  std::filesystem::create_directories(dir);
  OnnxModelBuilder builder("shrink_graph");
  builder.AddNode("Relu", {"x"}, {"r"});
  builder.AddNode("Shrink", {"r"}, {"y"})->set_name("shrink_1");
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  std::ofstream(dir + "/model.onnx", std::ios::binary) << builder.Serialize();
  testing::CommandResult result =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--model-repository", ::testing::TempDir() + "/bad_repo"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.out, AllOf(HasSubstr("UNIMPLEMENTED"), HasSubstr("model 'lstm'"),
                                HasSubstr("Shrink (node 'shrink_1')")));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// The default model's answer to `image` from a daemon started with `flags`
// (and --devices cpu:0), which then stops cleanly.
absl::StatusOr<v1::PredictResponse> DefaultModelAnswer(std::vector<std::string> flags,
                                                       const Tensor& image) {
  flags.insert(flags.begin(), {"--devices", "cpu:0"});
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(flags);
  if (!daemon.ok()) return daemon.status();
  auto client = *client::ReplicadClient::Connect((*daemon)->target(), {});
  v1::PredictRequest request;
  request.set_model("default");
  *request.add_inputs() = ToProto("image", image);
  absl::StatusOr<v1::PredictResponse> response = client->Predict(request);
  EXPECT_EQ((*daemon)->StopWith(SIGINT), 0) << (*daemon)->output();
  return response;
}

// Model parallelism: under --slot-memory-limit (one byte less than the
// default model's weights) the daemon refuses to load it on one slot and
// serves it placed over two contexts of --device-map, as one "pipeline"
// replica naming both, with the answer of an unbounded one-slot daemon, bit
// for bit (--micro-batches 1: the same shapes as one slot). (Its training:
// model_training_e2e_test's APlacedModelTrainsThroughItsPipelineLikeOneSlot.)
TEST(ReplicadStartupTest, AModelOverASlotsLimitServesPlacedOverTwo) {
  size_t weight_bytes = 0;
  const std::shared_ptr<const Model> model = *LoadDefaultModel();
  for (const auto& [v, weight] : model->graph().initializers) {
    weight_bytes += weight.byte_size();
  }
  const std::string limit = std::to_string(weight_bytes - 1);
  testing::CommandResult refused =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--devices", "cpu:0", "--slot-memory-limit", limit});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.out, HasSubstr("(--slot-memory-limit); place the model over several slots"));

  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      {"--device-map", "dev0->cpu:0;dev1->cpu:0", "--placement", "conv*->dev0; fc*->dev1",
       "--slot-memory-limit", limit, "--micro-batches", "1"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = *client::ReplicadClient::Connect((*daemon)->target(), {});
  absl::StatusOr<v1::ModelInfo> info = client->GetModel("default");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->replicas_size(), 1);
  EXPECT_EQ(info->replicas(0).slot(), "pipeline");
  EXPECT_EQ(info->replicas(0).device(), "dev0=cpu:0+dev1=cpu:0");
  const Tensor image = testing::RandomTensor({5, 1, 28, 28}, 8);
  v1::PredictRequest request;
  request.set_model("default");
  *request.add_inputs() = ToProto("image", image);
  absl::StatusOr<v1::PredictResponse> placed = client->Predict(request);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ((*daemon)->StopWith(SIGINT), 0) << (*daemon)->output();
  absl::StatusOr<v1::PredictResponse> whole = DefaultModelAnswer({}, image);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(placed->outputs_size(), whole->outputs_size());
  for (int o = 0; o < whole->outputs_size(); ++o) {
    EXPECT_EQ(placed->outputs(o).raw(), whole->outputs(o).raw()) << whole->outputs(o).name();
  }
}

// A config.pbtxt's parameters place its model (placement over the slots
// --devices names r0 and r1, micro_batches): it serves as one "pipeline"
// replica; a micro_batches that is not a positive integer fails the load
// naming the parameter and the file.
TEST(ReplicadStartupTest, AConfigPbtxtPlacesItsModel) {
  const std::filesystem::path repository = ::testing::TempDir() + "/placed_repo";
  std::filesystem::create_directories(repository / "cnn" / "1");
  std::ofstream(repository / "cnn" / "1" / "model.onnx", std::ios::binary)
      << DefaultModelOnnxBytes();
  const auto configure = [&](const std::string& micro_batches) {
    std::ofstream(repository / "cnn" / "config.pbtxt")
        << "name: \"cnn\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 64\n"
        << "parameters { key: \"placement\" value { string_value: \"conv*->r0; fc*->r1\" } }\n"
        << "parameters { key: \"micro_batches\" value { string_value: \"" << micro_batches
        << "\" } }\n";
  };
  configure("0");
  testing::CommandResult refused =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--devices", "cpu:0,cpu:0", "--model-repository", repository.string()});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.out, AllOf(HasSubstr("cnn/config.pbtxt"),
                                 HasSubstr("parameters.micro_batches: expected an integer >= 1, "
                                           "received '0'")));
  configure("2");
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start({"--devices", "cpu:0,cpu:0", "--model-repository", repository.string()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = *client::ReplicadClient::Connect((*daemon)->target(), {});
  absl::StatusOr<v1::ModelInfo> info = client->GetModel("cnn");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->replicas_size(), 1);
  EXPECT_EQ(info->replicas(0).device(), "r0=cpu:0+r1=cpu:0");
  v1::PredictRequest request;
  request.set_model("cnn");
  *request.add_inputs() = ToProto("image", testing::RandomTensor({5, 1, 28, 28}, 2));
  absl::StatusOr<v1::PredictResponse> answer = client->Predict(request);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ((*daemon)->StopWith(SIGINT), 0) << (*daemon)->output();
}

// --no-winograd (direct convolutions on CPU slots) and --cpu-kernel-cache 0
// (no oneDNN primitives kept beyond the plans') are accepted and serve; a
// negative cache is refused naming the flag.
TEST(ReplicadStartupTest, NoWinogradAndNoKernelCacheServe) {
  testing::CommandResult refused =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--devices", "cpu:0", "--cpu-kernel-cache", "-1"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.out, HasSubstr("--cpu-kernel-cache: the kernel cache capacity must be 0 or "
                                     "more; received -1"));
  absl::StatusOr<v1::PredictResponse> response = DefaultModelAnswer(
      {"--no-winograd", "--cpu-kernel-cache", "0"}, testing::RandomTensor({4, 1, 28, 28}, 3));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->outputs(0).name(), "logits");
}

// --precision bf16 serves the default model (its products in bfloat16 where
// the CPU has them), with logits within bfloat16's rounding of the float32
// daemon's: 2e-2 relative L2; tf32 and fp16 on a CPU slot (no TF32 or
// float16 products there) answer float32's bits; an unknown precision is
// refused naming the flag.
TEST(ReplicadStartupTest, PrecisionBFloat16Serves) {
  testing::CommandResult unknown =
      testing::RunCommand({testing::BinDir() + "/replicad", "serve", "--listen", "127.0.0.1:0",
                           "--devices", "cpu:0", "--precision", "int3"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.out,
              HasSubstr("--precision: expected fp32, bf16, fp16 or tf32, received 'int3'"));
  const Tensor image = testing::RandomTensor({4, 1, 28, 28}, 3);
  std::vector<std::vector<float>> logits;
  for (const char* precision : {"fp32", "bf16", "tf32", "fp16"}) {
    absl::StatusOr<v1::PredictResponse> response =
        DefaultModelAnswer({"--precision", precision}, image);
    ASSERT_TRUE(response.ok()) << response.status();
    const std::string& raw = response->outputs(0).raw();
    logits.emplace_back(raw.size() / sizeof(float));
    std::memcpy(logits.back().data(), raw.data(), raw.size());
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    diff += (logits[1][i] - logits[0][i]) * (logits[1][i] - logits[0][i]);
    norm += logits[0][i] * logits[0][i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 2e-2);
  // tf32 and fp16 on a CPU slot are float32, bit for bit.
  EXPECT_EQ(logits[2], logits[0]);
  EXPECT_EQ(logits[3], logits[0]);
}

// --listen unix:PATH serves gRPC on a Unix domain socket, for clients on the
// same host (a sidecar, a local benchmark): the same answers as over TCP, no
// warning about exposure, and the socket file gone after a clean stop. A
// second daemon given the same path refuses to start (gRPC would remove the
// first one's socket file and take its clients), and the first serves on.
TEST(ReplicadStartupTest, ServesOnAUnixSocket) {
  // Short (a socket path fits in 108 bytes) and this process's own.
  const std::string socket = absl::StrCat("/tmp/replicad_e2e_", getpid(), ".sock");
  std::filesystem::remove(socket);
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start({"--devices", "cpu:0", "--listen", "unix:" + socket});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ((*daemon)->target(), "unix:" + socket);
  EXPECT_EQ((*daemon)->grpc_port(), 0);
  EXPECT_TRUE(std::filesystem::exists(socket));
  auto client = *client::ReplicadClient::Connect((*daemon)->target(), {});
  v1::PredictRequest request = ImageRequest(6, 11);
  absl::StatusOr<v1::PredictResponse> response = client->Predict(request);
  ASSERT_TRUE(response.ok()) << response.status();
  std::unique_ptr<ReplicaSet> reference = testing::MakeCpuReplicaSet(*LoadDefaultModel(), {1});
  testing::PredictOutcome expected =
      testing::PredictAndWait(*reference, {FromProto(request.inputs(0))});
  ASSERT_TRUE(expected.status.ok());
  ASSERT_EQ(response->outputs_size(), 2);
  EXPECT_LE(testing::RelativeL2(FromProto(response->outputs(0)), expected.outputs[0]), 1e-6);

  // Bounded: were the check gone, the second daemon would serve until stopped.
  testing::CommandResult second =
      testing::RunCommand({"/usr/bin/timeout", "-s", "TERM", "60", testing::BinDir() + "/replicad",
                           "serve", "--devices", "cpu:0", "--listen", "unix:" + socket,
                           "--metrics-listen", "", "--http-listen", ""});
  EXPECT_EQ(second.exit_code, 1) << second.out;
  EXPECT_THAT(second.out, AllOf(HasSubstr("ALREADY_EXISTS"),
                                HasSubstr("a server already accepts connections on " + socket)));
  EXPECT_TRUE(client->Predict(request).ok());

  EXPECT_EQ((*daemon)->StopWith(SIGTERM), 0) << (*daemon)->output();
  EXPECT_THAT((*daemon)->output(), Not(HasSubstr("WARNING")));
  EXPECT_FALSE(std::filesystem::exists(socket));
}

// --model-repository, --model and --device-map together: every model gets the
// mapped slots, named by their contexts.
TEST(ReplicadStartupTest, ModelRepositoryModelFlagAndDeviceMap) {
  const std::string repo = ::testing::TempDir() + "/good_repo";
  std::filesystem::create_directories(repo + "/cnn");
  std::filesystem::create_directories(repo + "/empty_dir_is_skipped");
  std::ofstream(repo + "/cnn/model.onnx", std::ios::binary) << DefaultModelOnnxBytes();
  const std::string extra = ::testing::TempDir() + "/extra.onnx";
  std::ofstream(extra, std::ios::binary) << testing::TwoInputTwoOutputOnnx();
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start({"--model-repository", repo, "--model", "pair=" + extra, "--device-map",
                            "fast->cpu0;slow->cpu0", "--slot-weights", "3,1"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = *client::ReplicadClient::Connect((*daemon)->target(), {});
  absl::StatusOr<v1::ListModelsResponse> models = client->ListModels();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->models_size(), 2);
  EXPECT_EQ(models->models(0).name(), "cnn");
  EXPECT_EQ(models->models(0).path(), repo + "/cnn/model.onnx");
  EXPECT_EQ(models->models(1).name(), "pair");
  absl::StatusOr<v1::ModelInfo> pair = client->GetModel("pair");
  ASSERT_TRUE(pair.ok());
  ASSERT_EQ(pair->replicas_size(), 2);
  EXPECT_EQ(pair->replicas(0).slot(), "fast");
  EXPECT_EQ(pair->replicas(0).weight(), 3.0);
  EXPECT_EQ(pair->replicas(1).slot(), "slow");

  v1::PredictRequest request;
  request.set_model("pair");
  *request.add_inputs() = ToProto("image", testing::RandomTensor({8, 3, 6, 6}, 1));
  *request.add_inputs() = ToProto("features", testing::RandomTensor({8, 5}, 2));
  absl::StatusOr<v1::PredictResponse> response = client->Predict(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->slices_size(), 2);
  EXPECT_EQ(response->slices(0).slot(), "fast");
  EXPECT_EQ(response->slices(0).end(), 6);  // 3:1 of 8 rows.
  EXPECT_EQ(response->outputs(0).name(), "sum");
  EXPECT_THAT(response->outputs(1).shape(), ::testing::ElementsAre(8, 3));
  EXPECT_EQ((*daemon)->StopWith(SIGINT), 0) << (*daemon)->output();
}

}  // namespace
}  // namespace replicad
