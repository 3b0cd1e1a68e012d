// TrainSteps against the real daemon: steps streamed by one client train
// exactly as the same steps sent one TrainStep at a time, answered in
// order; the first failing step (its decoding, its binding or its run) ends
// the call with its error and nothing sent after it runs, a message that is
// no TrainStepRequest at all too; an empty stream, a flood of steps written
// without reading, a client that cancels (counted CANCELLED), and a caller
// without the train role are all answered and lose nothing.
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/replicad_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "replicad/v1/replicad.grpc.pb.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/training_requests.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using testing::DaemonProcess;
using ::testing::HasSubstr;

// A step on the default model; with `bad_label`, its last row has that class.
v1::TrainStepRequest StepRequest(int64_t batch, uint64_t seed, int64_t bad_label = -1) {
  v1::TrainStepRequest request = testing::DefaultModelStep(batch, seed);
  if (bad_label >= 0) {
    std::string& raw = *request.mutable_targets()->mutable_raw();
    std::memcpy(raw.data() + raw.size() - sizeof(int64_t), &bad_label, sizeof(int64_t));
  }
  return request;
}

class TrainStepsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({"--devices", "cpu:0,cpu:0"}); }

  void Start(std::vector<std::string> args) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(args);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    channel_ = grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials());
    stub_ = v1::Replicad::NewStub(channel_);
    grpc::ClientContext context;
    Authorize(&context);
    v1::ConfigureTrainingResponse configured;
    grpc::Status status = stub_->ConfigureTraining(&context, testing::SgdConfig(), &configured);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  void Authorize(grpc::ClientContext* context) const {
    if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  }

  struct Streamed {
    std::vector<v1::TrainStepResponse> answers;
    grpc::Status status;
  };
  // Writes every request, half-closes, then reads every answer.
  Streamed Stream(const std::vector<v1::TrainStepRequest>& requests) {
    grpc::ClientContext context;
    Authorize(&context);
    auto call = stub_->TrainSteps(&context);
    for (const v1::TrainStepRequest& request : requests) {
      // A write fails once the call has ended (a step failed): stop there.
      if (!call->Write(request)) break;
    }
    call->WritesDone();
    Streamed streamed;
    v1::TrainStepResponse answer;
    while (call->Read(&answer)) streamed.answers.push_back(answer);
    streamed.status = call->Finish();
    return streamed;
  }

  absl::StatusOr<v1::TrainStepResponse> Unary(const v1::TrainStepRequest& request) {
    grpc::ClientContext context;
    Authorize(&context);
    v1::TrainStepResponse response;
    grpc::Status status = stub_->TrainStep(&context, request, &response);
    if (!status.ok()) return absl::InternalError(status.error_message());
    return response;
  }

  // TrainSteps with the messages as bytes, as a client of another
  // language (or a broken one) may send them.
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> RawStream(
      grpc::ClientContext* context) {
    const grpc::internal::RpcMethod method("/replicad.v1.Replicad/TrainSteps",
                                           grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
    return std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            channel_.get(), method, context));
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Replicad::Stub> stub_;
  std::string token_;
};

grpc::ByteBuffer Bytes(const v1::TrainStepRequest& request) {
  grpc::ByteBuffer buffer;
  bool own = false;
  EXPECT_TRUE(
      grpc::SerializationTraits<v1::TrainStepRequest>::Serialize(request, &buffer, &own).ok());
  return buffer;
}

// Two daemons from the same weights: one streamed, one stepped one call at
// a time, on the same batches (7 splits unevenly over the two slots). The
// answers agree exactly (the same float32 arithmetic in the same order),
// step by step; CPU slots read their rows in place, never prefetched.
TEST_F(TrainStepsTest, StreamedStepsTrainExactlyLikeOneCallEach) {
  std::vector<v1::TrainStepRequest> requests;
  for (int k = 0; k < 5; ++k) requests.push_back(StepRequest(k == 2 ? 1 : 7, 10 + k));
  Streamed streamed = Stream(requests);
  // A second daemon, as the first started, takes the same steps one call each.
  std::unique_ptr<DaemonProcess> streamed_daemon = std::move(daemon_);
  Start({"--devices", "cpu:0,cpu:0"});
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  ASSERT_EQ(streamed.answers.size(), requests.size());
  for (size_t k = 0; k < requests.size(); ++k) {
    absl::StatusOr<v1::TrainStepResponse> one = Unary(requests[k]);
    ASSERT_TRUE(one.ok()) << one.status();
    const v1::TrainStepResponse& got = streamed.answers[k];
    EXPECT_EQ(got.step(), static_cast<int64_t>(k + 1));
    EXPECT_EQ(got.loss(), one->loss()) << "step " << k + 1;  // Exact: the same arithmetic.
    EXPECT_EQ(got.samples(), one->samples());
    ASSERT_EQ(got.replicas_size(), one->replicas_size());
    for (const v1::ReplicaStep& replica : got.replicas()) {
      EXPECT_FALSE(replica.input_prefetched()) << "a CPU slot reads its rows in place";
    }
  }
}

// A step whose label is out of range fails; the steps before it were
// answered, it ends the call with its error naming the label, and the
// step after it never ran (the next TrainStep is the second step).
TEST_F(TrainStepsTest, TheFirstFailingStepEndsTheCallAndNothingAfterItRuns) {
  Streamed streamed = Stream({StepRequest(4, 1), StepRequest(4, 2, /*bad_label=*/99),
                              StepRequest(4, 3), StepRequest(4, 4)});
  ASSERT_EQ(streamed.answers.size(), 1u);
  EXPECT_EQ(streamed.answers[0].step(), 1);
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(streamed.status.error_message(), AllOf(HasSubstr("targets[3]"), HasSubstr("99")));
  absl::StatusOr<v1::TrainStepResponse> next = Unary(StepRequest(4, 5));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->step(), 2);
}

// A message the core cannot take (an unknown dtype, an unknown model, no
// targets) ends the call with the error TrainStep answers, naming the
// field, after the answers to the steps before it.
TEST_F(TrainStepsTest, BadMessagesEndTheCallNamingTheField) {
  v1::TrainStepRequest bad_dtype = StepRequest(2, 1);
  bad_dtype.mutable_inputs(0)->set_dtype(static_cast<v1::DataType>(4242));
  v1::TrainStepRequest unknown_model = StepRequest(2, 1);
  unknown_model.set_model("nope");
  v1::TrainStepRequest no_targets = StepRequest(2, 1);
  no_targets.clear_targets();
  struct Case {
    v1::TrainStepRequest request;
    grpc::StatusCode code;
    std::string names;
  };
  int64_t steps = 0;
  for (const Case& c : {Case{bad_dtype, grpc::StatusCode::INVALID_ARGUMENT, "inputs[0]"},
                        Case{unknown_model, grpc::StatusCode::NOT_FOUND, "nope"},
                        Case{no_targets, grpc::StatusCode::INVALID_ARGUMENT, "targets"}}) {
    Streamed streamed = Stream({StepRequest(2, 7), c.request, StepRequest(2, 8)});
    ASSERT_EQ(streamed.answers.size(), 1u) << c.names;
    EXPECT_EQ(streamed.answers[0].step(), ++steps);
    EXPECT_EQ(streamed.status.error_code(), c.code) << streamed.status.error_message();
    EXPECT_THAT(streamed.status.error_message(), HasSubstr(c.names));
  }
}

// Bytes protobuf cannot parse as the third message: the two steps before
// it are answered, the call ends with INVALID_ARGUMENT naming the message,
// and the step after it never ran. (gRPC's own decoding ends such a read as
// a half-close does: the call would end OK, the steps silently dropped.)
TEST_F(TrainStepsTest, BytesThatAreNoStepEndTheCallNamingTheMessage) {
  grpc::ClientContext context;
  auto call = RawStream(&context);
  ASSERT_TRUE(call->Write(Bytes(StepRequest(2, 21))));
  ASSERT_TRUE(call->Write(Bytes(StepRequest(2, 22))));
  grpc::Slice garbage(std::string("\xff\xff\xff\xff"));
  call->Write(grpc::ByteBuffer(&garbage, 1));
  call->Write(Bytes(StepRequest(2, 23)));
  call->WritesDone();
  std::vector<int64_t> steps;
  grpc::ByteBuffer answer;
  while (call->Read(&answer)) {
    v1::TrainStepResponse response;
    ASSERT_TRUE(
        grpc::SerializationTraits<v1::TrainStepResponse>::Deserialize(&answer, &response).ok());
    steps.push_back(response.step());
  }
  const grpc::Status status = call->Finish();
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), AllOf(HasSubstr("message 3"), HasSubstr("4 bytes"),
                                            HasSubstr("not a valid replicad.v1.TrainStepRequest")));
  absl::StatusOr<v1::TrainStepResponse> next = Unary(StepRequest(2, 24));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->step(), 3);
}

// No steps: answered OK at once, with nothing.
TEST_F(TrainStepsTest, AnEmptyStreamEndsOk) {
  Streamed streamed = Stream({});
  EXPECT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  EXPECT_TRUE(streamed.answers.empty());
}

// 150 small steps written before any answer is read: the daemon reads a
// message only while it has room (one step running, one waiting), so the
// client is held back by flow control, and every step is answered in
// order. (Many quick steps: a read racing an answer once overwrote the
// step waiting, and the call never ended.)
TEST_F(TrainStepsTest, AFloodOfStepsIsAnsweredInOrder) {
  std::vector<v1::TrainStepRequest> requests;
  for (int k = 0; k < 150; ++k) requests.push_back(StepRequest(2, 100 + k));
  Streamed streamed = Stream(requests);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  ASSERT_EQ(streamed.answers.size(), requests.size());
  for (size_t k = 0; k < streamed.answers.size(); ++k) {
    EXPECT_EQ(streamed.answers[k].step(), static_cast<int64_t>(k + 1));
  }
}

// A client that cancels mid-stream: the daemon finishes the step it runs,
// drops the rest, and goes on serving (the next TrainStep is answered with
// a step count no larger than the steps sent).
TEST_F(TrainStepsTest, ACancelledStreamLosesNothingElse) {
  {
    grpc::ClientContext context;
    auto call = stub_->TrainSteps(&context);
    for (int k = 0; k < 6; ++k) ASSERT_TRUE(call->Write(StepRequest(8, 200 + k)));
    v1::TrainStepResponse first;
    ASSERT_TRUE(call->Read(&first));
    EXPECT_EQ(first.step(), 1);
    context.TryCancel();
    EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  absl::StatusOr<v1::TrainStepResponse> next = Unary(StepRequest(2, 300));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GE(next->step(), 2);
  EXPECT_LE(next->step(), 7);
}

// A client that cancels once every step it sent was answered (the call
// idle): the metrics count the call CANCELLED, as the client saw it.
TEST_F(TrainStepsTest, AnIdleStreamCancelledCountsAsCancelled) {
  {
    grpc::ClientContext context;
    auto call = stub_->TrainSteps(&context);
    ASSERT_TRUE(call->Write(StepRequest(2, 400)));
    v1::TrainStepResponse first;
    ASSERT_TRUE(call->Read(&first));
    context.TryCancel();
    EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The call's count is recorded as it ends, which may follow the client's Finish.
  std::string metrics;
  for (int attempt = 0; attempt < 500; ++attempt) {  // 10 s, for slow (sanitizer) builds.
    absl::StatusOr<std::string> scraped = testing::HttpGet(daemon_->metrics_port(), "/metrics");
    ASSERT_TRUE(scraped.ok()) << scraped.status();
    metrics = *scraped;
    if (metrics.find("method=\"TrainSteps\"") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(metrics, HasSubstr("method=\"TrainSteps\",code=\"CANCELLED\""));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("method=\"TrainSteps\",code=\"OK\"")));
}

// TrainSteps needs the train role, as TrainStep does.
TEST_F(TrainStepsTest, ACallerWithoutTheTrainRoleIsRefused) {
  const std::string tokens = ::testing::TempDir() + "/train_steps_tokens";
  std::ofstream(tokens) << "infer-only-0123456789abcdef infer\n"
                        << "trainer-0123456789abcdef infer,train\n";
  token_ = "trainer-0123456789abcdef";
  Start({"--devices", "cpu:0", "--auth-tokens", tokens});
  token_ = "infer-only-0123456789abcdef";
  Streamed refused = Stream({StepRequest(2, 1)});
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << refused.status.error_message();
  EXPECT_TRUE(refused.answers.empty());
  token_ = "trainer-0123456789abcdef";
  Streamed allowed = Stream({StepRequest(2, 1)});
  ASSERT_TRUE(allowed.status.ok()) << allowed.status.error_message();
  ASSERT_EQ(allowed.answers.size(), 1u);
  EXPECT_EQ(allowed.answers[0].step(), 1);
}

}  // namespace
}  // namespace replicad
