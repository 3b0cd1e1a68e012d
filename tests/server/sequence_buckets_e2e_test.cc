// Sequence buckets through the daemon (parameters.sequence_buckets of a
// config.pbtxt, core/serve/sequence_buckets.h): two requests of lengths 5
// and 7, sent together to a model with buckets 8 and 16, are padded to 8,
// fused into one batch (the model's replicad_batches_total counts 1) and
// answered with their own lengths: the running sum exactly as the model
// computes it unpadded in process, the masked pooled sum within 1e-6
// relative (a reduction over 8 values groups its additions otherwise).
// Without the buckets the two lengths would run as two batches.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/replicad_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/proto_tensors.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr char kConfig[] = R"(name: "seq"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "mask" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "running" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "pooled" data_type: TYPE_FP32 dims: [ ] } ]
dynamic_batching { max_queue_delay_microseconds: 5000000 preferred_batch_size: [ 2 ] }
parameters { key: "sequence_buckets" value { string_value: "8,16" } }
)";

std::vector<Tensor> Request(int64_t length, uint64_t seed) {
  Tensor mask = Tensor::Host(DType::kFloat32, {1, length});
  for (int64_t i = 0; i < length; ++i) mask.data<float>()[i] = i % 3 == 2 ? 0.0f : 1.0f;
  return {testing::RandomTensor({1, length}, seed), mask};
}

TEST(SequenceBucketsE2eTest, TwoLengthsOfOneBucketRunAsOneBatchAndKeepTheirLengths) {
  const std::filesystem::path repository =
      std::filesystem::temp_directory_path() / absl::StrCat("replicad_buckets_", getpid());
  std::filesystem::create_directories(repository / "seq" / "1");
  std::ofstream(repository / "seq" / "1" / "model.onnx", std::ios::binary)
      << testing::SequenceSumOnnx();
  std::ofstream(repository / "seq" / "config.pbtxt") << kConfig;
  absl::StatusOr<std::unique_ptr<testing::DaemonProcess>> daemon = testing::DaemonProcess::Start(
      {"--model-repository", repository.string(), "--devices", "cpu:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::unique_ptr<ReplicaSet> unpadded =
      testing::MakeCpuReplicaSet(testing::LoadOrDie(testing::SequenceSumOnnx(), "seq"), {1});

  const int64_t lengths[2] = {5, 7};
  absl::StatusOr<v1::PredictResponse> responses[2];
  std::vector<std::thread> clients;
  for (int c = 0; c < 2; ++c) {
    clients.emplace_back([&, c] {
      absl::StatusOr<std::unique_ptr<client::ReplicadClient>> client =
          client::ReplicadClient::Connect((*daemon)->target(), {});
      ASSERT_TRUE(client.ok()) << client.status();
      v1::PredictRequest request;
      request.set_model("seq");
      const std::vector<Tensor> inputs = Request(lengths[c], 10 + c);
      *request.add_inputs() = testing::ToProto("x", inputs[0]);
      *request.add_inputs() = testing::ToProto("mask", inputs[1]);
      responses[c] = (*client)->Predict(request);
    });
  }
  for (std::thread& t : clients) t.join();
  for (int c = 0; c < 2; ++c) {
    ASSERT_TRUE(responses[c].ok()) << responses[c].status();
    const testing::PredictOutcome expected =
        testing::PredictAndWait(*unpadded, Request(lengths[c], 10 + c));
    ASSERT_TRUE(expected.status.ok()) << expected.status;
    ASSERT_EQ(responses[c]->outputs_size(), 2);
    const Tensor running = testing::FromProto(responses[c]->outputs(0));
    const Tensor pooled = testing::FromProto(responses[c]->outputs(1));
    ASSERT_EQ(running.shape(), (Shape{1, lengths[c]}));
    for (int64_t i = 0; i < lengths[c]; ++i) {
      EXPECT_EQ(running.data<float>()[i], expected.outputs[0].data<float>()[i]) << c << ", " << i;
    }
    const float e = expected.outputs[1].data<float>()[0];
    EXPECT_NEAR(pooled.data<float>()[0], e, 1e-6 * std::fabs(e)) << c;
  }
  absl::StatusOr<std::string> metrics = testing::HttpGet((*daemon)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, ::testing::HasSubstr("replicad_batches_total{model=\"seq\"} 1\n"));
  EXPECT_THAT(*metrics, ::testing::HasSubstr("replicad_batched_requests_total{model=\"seq\"} 2\n"));
  std::filesystem::remove_all(repository);
}

}  // namespace
}  // namespace replicad
