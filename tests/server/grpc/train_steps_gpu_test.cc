// TrainSteps on a daemon whose slots are on a GPU: steps after the first
// read rows their slots uploaded while the step before computed
// (ReplicaStep.input_prefetched; a step whose message the daemon had not
// yet taken when the slots looked uploads in its own step, so the test asks
// for most, not all: data_parallel_trainer_gpu_test checks every step with
// the batch posted in time), and the streamed steps train bit for bit
// as the same steps sent one TrainStep each to a second daemon (the same
// deterministic cuDNN algorithms; only where the rows come from differs).
// Skips without a GPU (CTest label gpu).
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "replicad/v1/replicad.grpc.pb.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/local_gpus.h"
#include "tests/testing/training_requests.h"

namespace replicad {
namespace {

using testing::DaemonProcess;

std::unique_ptr<v1::Replicad::Stub> Configured(const DaemonProcess& daemon) {
  auto stub = v1::Replicad::NewStub(
      grpc::CreateChannel(daemon.target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::ConfigureTrainingResponse configured;
  EXPECT_TRUE(stub->ConfigureTraining(&context, testing::SgdConfig(), &configured).ok());
  return stub;
}

TEST(TrainStepsGpuTest, StreamedStepsReadRowsUploadedAheadAndTrainAsOneCallEach) {
  if (testing::LocalGpus().empty()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::string> args = {"--devices", "cuda:0,cuda:0"};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> streamed = DaemonProcess::Start(args);
  absl::StatusOr<std::unique_ptr<DaemonProcess>> unary = DaemonProcess::Start(args);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_TRUE(unary.ok()) << unary.status();
  auto streamed_stub = Configured(**streamed);
  auto unary_stub = Configured(**unary);
  std::vector<v1::TrainStepRequest> requests;
  for (int k = 0; k < 6; ++k)
    requests.push_back(testing::DefaultModelStep(k == 3 ? 7 : 64, 40 + k));

  grpc::ClientContext context;
  auto call = streamed_stub->TrainSteps(&context);
  for (const v1::TrainStepRequest& request : requests) ASSERT_TRUE(call->Write(request));
  call->WritesDone();
  std::vector<v1::TrainStepResponse> answers;
  v1::TrainStepResponse answer;
  while (call->Read(&answer)) answers.push_back(answer);
  grpc::Status status = call->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(answers.size(), requests.size());
  int prefetched = 0;
  for (size_t k = 0; k < requests.size(); ++k) {
    grpc::ClientContext one_context;
    v1::TrainStepResponse one;
    ASSERT_TRUE(unary_stub->TrainStep(&one_context, requests[k], &one).ok());
    EXPECT_EQ(answers[k].loss(), one.loss()) << "step " << k + 1;
    // The client wrote every step at once: from the second on, each was
    // waiting while the one before ran.
    for (const v1::ReplicaStep& replica : answers[k].replicas()) {
      if (k == 0) {
        EXPECT_FALSE(replica.input_prefetched()) << "the first step has none before it";
      }
      prefetched += replica.input_prefetched() ? 1 : 0;
    }
    for (const v1::ReplicaStep& replica : one.replicas()) {
      EXPECT_FALSE(replica.input_prefetched()) << "one call each: nothing is sent ahead";
    }
  }
  // 5 steps after the first, 2 slots each (step 4's 7 rows give both some).
  EXPECT_GE(prefetched, 6) << "of 10 slices after the first step";
}

}  // namespace
}  // namespace replicad
