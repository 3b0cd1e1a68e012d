#include "client/replicad_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad::client {
namespace {

using ::testing::HasSubstr;

TEST(FromGrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    SCOPED_TRACE(code);
    absl::Status s =
        FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(code), "model 'x': bad"));
    EXPECT_EQ(static_cast<int>(s.code()), code);
    EXPECT_EQ(s.message(), "model 'x': bad");
  }
  // Spot checks that the numbering really is shared, by name.
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "")).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "")).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(FromGrpcStatusTest, UnknownCodeBecomesUnknownWithTheNumber) {
  // 20 names no code but is a value grpc::StatusCode can hold (its enumerators -1..16 give it
  // the range -32..31); a number outside that range would make the cast itself undefined.
  absl::Status s = FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "odd"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(s.message(), "gRPC status 20: odd");
}

// An in-process stand-in for the server: Predict echoes its inputs as outputs
// and reports one slice; model "slow" waits until the client gives up.
class FakeReplicad final : public v1::Replicad::Service {
 public:
  grpc::Status Predict(grpc::ServerContext* context, const v1::PredictRequest* request,
                       v1::PredictResponse* response) override {
    if (request->model() == "slow") {
      while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      saw_cancel_ = true;
      return grpc::Status(grpc::StatusCode::CANCELLED, "gave up");
    }
    if (request->model() != "echo") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no model '" + request->model() + "'");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_request_ = request->SerializeAsString();
    }
    response->set_model(request->model());
    *response->mutable_outputs() = request->inputs();
    v1::SliceInfo* slice = response->add_slices();
    slice->set_slot("r0");
    slice->set_device("cpu:0");
    slice->set_end(request->inputs_size() > 0 ? request->inputs(0).shape(0) : 0);
    return grpc::Status::OK;
  }

  grpc::Status ListDevices(grpc::ServerContext*, const v1::ListDevicesRequest*,
                           v1::ListDevicesResponse* response) override {
    v1::DeviceInfo* d = response->add_devices();
    d->set_id("cpu:0");
    d->set_kind("cpu");
    d->set_slots(2);
    return grpc::Status::OK;
  }

  grpc::Status ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                          v1::ListModelsResponse* response) override {
    response->add_models()->set_name("echo");
    return grpc::Status::OK;
  }

  grpc::Status GetModel(grpc::ServerContext*, const v1::GetModelRequest* request,
                        v1::GetModelResponse* response) override {
    if (request->name() != "echo") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no model '" + request->name() + "'");
    }
    response->mutable_model()->set_name("echo");
    response->mutable_model()->set_max_batch_size(64);
    return grpc::Status::OK;
  }

  std::string last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }

  std::atomic<bool> saw_cancel_{false};

 private:
  std::mutex mu_;
  std::string last_request_;  // The last echo Predict's, serialized.
};

class ReplicadClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(256 << 20);
    builder.SetMaxSendMessageSize(256 << 20);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<ReplicadClient> Client(ClientOptions options = {}) {
    absl::StatusOr<std::unique_ptr<ReplicadClient>> client =
        ReplicadClient::Connect(absl::StrCat("127.0.0.1:", port_), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  FakeReplicad service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(ReplicadClientTest, PredictCarriesMoreThanGrpcsDefaultFourMiB) {
  std::unique_ptr<ReplicadClient> client = Client();
  ASSERT_NE(client, nullptr);
  v1::PredictRequest request;
  request.set_model("echo");
  v1::Tensor* input = request.add_inputs();
  input->set_name("x");
  input->set_dtype(v1::DATA_TYPE_FLOAT32);
  input->add_shape(5);
  input->add_shape(1 << 20);  // 20 MiB.
  input->mutable_raw()->assign(size_t{20} << 20, '\x7f');
  absl::StatusOr<v1::PredictResponse> response = client->Predict(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->outputs_size(), 1);
  EXPECT_EQ(response->outputs(0).raw(), input->raw());
  ASSERT_EQ(response->slices_size(), 1);
  EXPECT_EQ(response->slices(0).end(), 5);
}

TEST_F(ReplicadClientTest, MessageLimitIsEnforced) {
  ClientOptions options;
  options.max_message_bytes = 1 << 20;
  std::unique_ptr<ReplicadClient> client = Client(options);
  ASSERT_NE(client, nullptr);
  v1::PredictRequest request;
  request.set_model("echo");
  request.add_inputs()->mutable_raw()->assign(2 << 20, 'a');
  EXPECT_EQ(client->Predict(request).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(ReplicadClientTest, ServerErrorsKeepCodeAndMessage) {
  std::unique_ptr<ReplicadClient> client = Client();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<v1::ModelInfo> model = client->GetModel("resnet");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(model.status().message(), "no model 'resnet'");

  model = client->GetModel("echo");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->max_batch_size(), 64);

  absl::StatusOr<v1::ListDevicesResponse> devices = client->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->devices_size(), 1);
  EXPECT_EQ(devices->devices(0).slots(), 2);

  absl::StatusOr<v1::ListModelsResponse> models = client->ListModels();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->models_size(), 1);
  EXPECT_EQ(models->models(0).name(), "echo");
}

TEST_F(ReplicadClientTest, TrainingCallsKeepTheServersStatus) {
  // The fake leaves the training RPCs to the generated base, as a server
  // without training does.
  std::unique_ptr<ReplicadClient> client = Client();
  ASSERT_NE(client, nullptr);
  v1::ConfigureTrainingRequest configure;
  configure.set_model("echo");
  EXPECT_EQ(client->ConfigureTraining(configure).status().code(), absl::StatusCode::kUnimplemented);
  v1::TrainStepRequest step;
  step.set_model("echo");
  EXPECT_EQ(client->TrainStep(step).status().code(), absl::StatusCode::kUnimplemented);
  v1::SaveCheckpointRequest save;
  save.set_model("echo");
  EXPECT_EQ(client->SaveCheckpoint(save).status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(ReplicadClientTest, DeadlineEndsTheCallAndCancelsItOnTheServer) {
  ClientOptions options;
  options.deadline = absl::Milliseconds(200);
  std::unique_ptr<ReplicadClient> client = Client(options);
  ASSERT_NE(client, nullptr);
  v1::PredictRequest request;
  request.set_model("slow");
  absl::Time start = absl::Now();
  EXPECT_EQ(client->Predict(request).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int i = 0; i < 500 && !service_.saw_cancel_; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(service_.saw_cancel_);
}

// 8 threads x 25 echoes of distinct payloads (padded with `pad` bytes per
// call index) through one client's `call`: every answer is its own request's.
void ExpectConcurrentEchoes(
    ReplicadClient& client, size_t pad,
    absl::StatusOr<v1::PredictResponse> (ReplicadClient::*call)(const v1::PredictRequest&)) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        v1::PredictRequest request;
        request.set_model("echo");
        v1::Tensor* x = request.add_inputs();
        x->add_shape(1);
        x->set_raw(absl::StrCat(t, ":", i, std::string(i * pad, 'p')));
        absl::StatusOr<v1::PredictResponse> r = (client.*call)(request);
        if (r.ok() && r->outputs_size() == 1 && r->outputs(0).raw() == x->raw()) ++ok;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok, 8 * 25);
}

TEST_F(ReplicadClientTest, ConcurrentCallsShareOneClient) {
  std::unique_ptr<ReplicadClient> client = Client();
  ASSERT_NE(client, nullptr);
  ExpectConcurrentEchoes(*client, 0, &ReplicadClient::Predict);
}

// PredictBorrowingInputs: the server parses the same request as from
// Predict, and answers the same.
TEST_F(ReplicadClientTest, PredictBorrowingInputsSendsWhatPredictSends) {
  std::unique_ptr<ReplicadClient> client = Client();
  ASSERT_NE(client, nullptr);
  v1::PredictRequest request;
  request.set_model("echo");
  v1::Tensor* big = request.add_inputs();
  big->set_name("x");
  big->set_dtype(v1::DATA_TYPE_FLOAT32);
  big->add_shape(5);
  big->add_shape(1 << 20);
  std::string bytes(size_t{20} << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  big->set_raw(std::move(bytes));
  v1::Tensor* small = request.add_inputs();
  small->set_name("ids");
  small->set_dtype(v1::DATA_TYPE_INT64);
  small->add_shape(1);
  small->set_raw(std::string("\x01\0\0\0\0\0\0\0", 8));
  request.add_inputs()->set_name("empty");
  request.add_output_names("y");
  request.add_output_names("z");

  absl::StatusOr<v1::PredictResponse> typed = client->Predict(request);
  ASSERT_TRUE(typed.ok()) << typed.status();
  EXPECT_EQ(service_.last_request(), request.SerializeAsString());
  absl::StatusOr<v1::PredictResponse> borrowing = client->PredictBorrowingInputs(request);
  ASSERT_TRUE(borrowing.ok()) << borrowing.status();
  EXPECT_EQ(service_.last_request(), request.SerializeAsString());
  EXPECT_EQ(borrowing->SerializeAsString(), typed->SerializeAsString());
  ASSERT_EQ(borrowing->outputs_size(), 3);
  EXPECT_EQ(borrowing->outputs(0).raw(), big->raw());

  v1::PredictRequest bare;
  bare.set_model("echo");
  ASSERT_TRUE(client->PredictBorrowingInputs(bare).ok());
  EXPECT_EQ(service_.last_request(), bare.SerializeAsString());
}

TEST_F(ReplicadClientTest, PredictBorrowingInputsKeepsLimitsErrorsAndDeadlines) {
  ClientOptions options;
  options.max_message_bytes = 1 << 20;
  options.deadline = absl::Milliseconds(200);
  std::unique_ptr<ReplicadClient> client = Client(options);
  ASSERT_NE(client, nullptr);
  v1::PredictRequest request;
  request.set_model("echo");
  request.add_inputs()->mutable_raw()->assign(2 << 20, 'a');
  EXPECT_EQ(client->PredictBorrowingInputs(request).status().code(),
            absl::StatusCode::kResourceExhausted);
  request.set_model("resnet");
  request.mutable_inputs(0)->mutable_raw()->resize(100);
  absl::Status missing = client->PredictBorrowingInputs(request).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "no model 'resnet'");
  request.set_model("slow");
  EXPECT_EQ(client->PredictBorrowingInputs(request).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ReplicadClientTest, ConcurrentBorrowingCallsShareOneClient) {
  std::unique_ptr<ReplicadClient> client = Client();
  ASSERT_NE(client, nullptr);
  ExpectConcurrentEchoes(*client, 1000, &ReplicadClient::PredictBorrowingInputs);
}

TEST(ReplicadClientConnectTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there, so the connection is refused.
  absl::StatusOr<std::unique_ptr<ReplicadClient>> client =
      ReplicadClient::Connect("127.0.0.1:1", ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->ListModels().status().code(), absl::StatusCode::kUnavailable);
}

TEST(ReplicadClientConnectTest, RejectsBadOptions) {
  EXPECT_EQ(ReplicadClient::Connect("", ClientOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClientOptions too_big;
  too_big.max_message_bytes = int64_t{4} << 30;
  absl::Status s = ReplicadClient::Connect("localhost:8500", too_big).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("max_message_bytes 4294967296: expected 1 to 2147483647"));
  ClientOptions zero_deadline;
  zero_deadline.deadline = absl::ZeroDuration();
  EXPECT_EQ(ReplicadClient::Connect("localhost:8500", zero_deadline).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace replicad::client
