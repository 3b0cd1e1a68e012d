// replicactl as a user runs it: the built binary against an in-process fake
// server. `train` is checked end to end here (the order of the samples, the
// batches, the summary lines, the checkpoint) because the real server's
// training is tested on its own side.

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/epoch_order.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replicad/v1/replicad.grpc.pb.h"

namespace replicad::client {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kRows = 4;
constexpr int kCols = 4;
constexpr int kClasses = 40;

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs the built replicactl with `args`; stdout and stderr apart, stderr a
// file (so not a terminal).
CommandResult RunReplicactl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {REPLICACTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  const std::string err_path = ::testing::TempDir() + "/replicactl_test_stderr";
  CommandResult result;
  int out_pipe[2];
  if (pipe(out_pipe) != 0) return result;
  const pid_t pid = fork();
  if (pid == 0) {
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    close(out_pipe[0]);
    execv(c_argv[0], c_argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(out_pipe[0], buffer, sizeof(buffer))) > 0) result.out.append(buffer, n);
  close(out_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  result.err = text.str();
  return result;
}

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// `count` images whose every pixel is the sample's index, labelled with it, so
// that the server can tell which samples came in which order.
void WriteSplit(const std::string& dir, const std::string& split, uint32_t count) {
  std::string images = BigEndian(0x803) + BigEndian(count) + BigEndian(kRows) + BigEndian(kCols);
  std::string labels = BigEndian(0x801) + BigEndian(count);
  for (uint32_t i = 0; i < count; ++i) {
    images.append(kRows * kCols, static_cast<char>(i));
    labels.push_back(static_cast<char>(i));
  }
  std::ofstream(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary) << images;
  std::ofstream(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary) << labels;
}

// Models: "mlp" takes [N, 1, 4, 4], "flat" takes [N, 16], "untrained" answers
// TrainStep as today's server does, "stalled" never answers TrainSteps. TrainStep reports loss 2
// and accuracy 0.5; Predict's "logits" pick the right class for even samples only.
class FakeTrainer final : public v1::Replicad::Service {
 public:
  grpc::Status GetModel(grpc::ServerContext*, const v1::GetModelRequest* request,
                        v1::GetModelResponse* response) override {
    const std::string& name = request->name();
    if (name != "mlp" && name != "flat" && name != "untrained" && name != "stalled") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no model '" + name + "'");
    }
    v1::ModelInfo* model = response->mutable_model();
    model->set_name(name);
    v1::TensorSpec* input = model->add_inputs();
    input->set_name("image");
    input->set_dtype(v1::DATA_TYPE_FLOAT32);
    for (int64_t dim : name == "flat" ? std::vector<int64_t>{-1, kRows * kCols}
                                      : std::vector<int64_t>{-1, 1, kRows, kCols}) {
      input->add_shape(dim);
    }
    for (const char* output : {"logits", "probabilities"}) {
      v1::TensorSpec* spec = model->add_outputs();
      spec->set_name(output);
      spec->set_dtype(v1::DATA_TYPE_FLOAT32);
      spec->add_shape(-1);
      spec->add_shape(kClasses);
    }
    return grpc::Status::OK;
  }

  // replicactl train streams its steps: each answered as TrainStep does, the
  // first failure ending the stream.
  grpc::Status TrainSteps(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::TrainStepResponse, v1::TrainStepRequest>* stream) override {
    v1::TrainStepRequest request;
    while (stream->Read(&request)) {
      if (request.model() == "stalled") {  // A server that stops answering.
        while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return grpc::Status::CANCELLED;
      }
      v1::TrainStepResponse response;
      grpc::Status status = TrainStep(context, &request, &response);
      if (!status.ok()) return status;
      stream->Write(response);
    }
    return grpc::Status::OK;
  }

  grpc::Status TrainStep(grpc::ServerContext*, const v1::TrainStepRequest* request,
                         v1::TrainStepResponse* response) override {
    if (request->model() == "untrained") {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "training is not implemented");
    }
    const v1::Tensor& targets = request->targets();
    const int64_t n = targets.shape_size() == 1 ? targets.shape(0) : -1;
    if (request->inputs_size() != 1 || targets.dtype() != v1::DATA_TYPE_INT64 || n < 1 ||
        targets.raw().size() != static_cast<size_t>(n) * 8) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed step");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const v1::Tensor& image = request->inputs(0);
    input_shape_.assign(image.shape().begin(), image.shape().end());
    input_name_ = image.name();
    for (int64_t i = 0; i < n; ++i) {
      int64_t label;
      std::memcpy(&label, targets.raw().data() + 8 * i, 8);
      float pixel;
      std::memcpy(&pixel, image.raw().data() + 4 * kRows * kCols * i, 4);
      if (pixel != static_cast<float>(label) / 255.0f) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "image and label disagree");
      }
      labels_.push_back(label);
    }
    batch_sizes_.push_back(n);
    response->set_model(request->model());
    response->set_loss(2);
    response->set_has_accuracy(true);
    response->set_accuracy(0.5);
    response->set_step(++steps_);
    response->set_samples(n);
    return grpc::Status::OK;
  }

  grpc::Status Predict(grpc::ServerContext*, const v1::PredictRequest* request,
                       v1::PredictResponse* response) override {
    const v1::Tensor& image = request->inputs(0);
    const int64_t n = image.shape(0);
    std::lock_guard<std::mutex> lock(mutex_);
    predict_outputs_.assign(request->output_names().begin(), request->output_names().end());
    v1::Tensor* logits = response->add_outputs();
    logits->set_name(request->output_names_size() == 1 ? request->output_names(0) : "logits");
    logits->set_dtype(v1::DATA_TYPE_FLOAT32);
    logits->add_shape(n);
    logits->add_shape(kClasses);
    std::vector<float> scores(static_cast<size_t>(n * kClasses), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      float pixel;
      std::memcpy(&pixel, image.raw().data() + 4 * kRows * kCols * i, 4);
      const int64_t sample = static_cast<int64_t>(pixel * 255.0f + 0.5f);
      scores[i * kClasses + (sample % 2 == 0 ? sample : sample + 1)] = 1.0f;
    }
    logits->set_raw(scores.data(), scores.size() * sizeof(float));
    return grpc::Status::OK;
  }

  grpc::Status SaveCheckpoint(grpc::ServerContext*, const v1::SaveCheckpointRequest* request,
                              v1::SaveCheckpointResponse* response) override {
    std::lock_guard<std::mutex> lock(mutex_);
    response->set_path(request->path());
    response->set_step(steps_);
    return grpc::Status::OK;
  }

  std::mutex mutex_;
  std::vector<int64_t> labels_;
  std::vector<int64_t> batch_sizes_;
  std::vector<int64_t> input_shape_;
  std::string input_name_;
  std::vector<std::string> predict_outputs_;
  int64_t steps_ = 0;
};

class ReplicactlTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    data_ = ::testing::TempDir() + "/replicactl_train_data";
    std::filesystem::remove_all(data_);
    std::filesystem::create_directories(data_);
    WriteSplit(data_, "train", 23);
    WriteSplit(data_, "t10k", 9);
  }
  void TearDown() override { server_->Shutdown(); }

  CommandResult Train(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--server", absl::StrCat("127.0.0.1:", port_), "train"};
    all.insert(all.end(), args.begin(), args.end());
    return RunReplicactl(all);
  }

  FakeTrainer service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string data_;
};

TEST_F(ReplicactlTrainTest, TrainsInTheDocumentedOrderAndReports) {
  CommandResult r = Train({"--model", "mlp", "--data", data_, "--epochs", "2", "--batch-size", "5",
                           "--seed", "3", "--checkpoint", "/models/mlp.onnx"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  std::vector<int64_t> expected = EpochOrder(23, 3, 0);
  std::vector<int64_t> second = EpochOrder(23, 3, 1);
  expected.insert(expected.end(), second.begin(), second.end());
  {
    // The handlers wrote these on gRPC's threads; replicactl's exit orders them before this
    // only through sockets and the kernel, which is no synchronization in C++ terms (TSan).
    std::lock_guard<std::mutex> lock(service_.mutex_);
    EXPECT_THAT(service_.labels_, ElementsAreArray(expected));
    EXPECT_THAT(service_.batch_sizes_, ElementsAre(5, 5, 5, 5, 3, 5, 5, 5, 5, 3));
    EXPECT_THAT(service_.input_shape_, ElementsAre(3, 1, kRows, kCols));
    EXPECT_EQ(service_.input_name_, "image");
    EXPECT_THAT(service_.predict_outputs_, ElementsAre("logits"));
  }

  // 5 of the 9 test samples (the even ones) are predicted right.
  EXPECT_THAT(r.out, AllOf(HasSubstr("epoch 1: train loss 2.0000, train accuracy 0.5000, "
                                     "test accuracy 0.5556, "),
                           HasSubstr("epoch 2: train loss 2.0000"),
                           HasSubstr("checkpoint: /models/mlp.onnx (step 10)")));
  // Progress goes to stderr, and as whole lines since stderr is a file here.
  EXPECT_THAT(r.err, AllOf(HasSubstr("epoch 1/2: 23/23 samples (100%)"),
                           HasSubstr("epoch 2/2: 23/23 samples (100%)"), Not(HasSubstr("\r"))));
  EXPECT_THAT(r.out, Not(HasSubstr("23/23 samples")));
}

TEST_F(ReplicactlTrainTest, LimitAndFlatInputAndChosenOutput) {
  CommandResult r = Train({"--model", "flat", "--data", data_, "--epochs", "1", "--batch-size", "4",
                           "--limit", "10", "--output", "probabilities"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::lock_guard<std::mutex> lock(service_.mutex_);  // As above.
  EXPECT_THAT(service_.labels_, ElementsAreArray(EpochOrder(10, 0, 0)));
  EXPECT_THAT(service_.batch_sizes_, ElementsAre(4, 4, 2));
  EXPECT_THAT(service_.input_shape_, ElementsAre(2, kRows * kCols));
  EXPECT_THAT(service_.predict_outputs_, ElementsAre("probabilities"));
  EXPECT_THAT(r.out, HasSubstr("test accuracy 0.5556"));
  EXPECT_THAT(r.out, Not(HasSubstr("checkpoint")));
}

TEST_F(ReplicactlTrainTest, ServerErrorsArePrintedWithTheirCode) {
  CommandResult r =
      Train({"--model", "untrained", "--data", data_, "--epochs", "1", "--batch-size", "8"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err,
              HasSubstr("replicactl: UNIMPLEMENTED: TrainSteps: training is not implemented"));
  // A server that stops answering: the epoch's stream ends at --timeout per
  // step (3 steps of 8 of the 23 samples: 0.6 s), not never.
  r = Train({"--model", "stalled", "--data", data_, "--epochs", "1", "--batch-size", "8",
             "--timeout", "0.2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("replicactl: DEADLINE_EXCEEDED: TrainSteps"));
  r = Train({"--model", "nope", "--data", data_, "--epochs", "1", "--batch-size", "8"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("replicactl: NOT_FOUND: GetModel: no model 'nope'"));
  r = Train({"--model", "mlp", "--data", data_, "--epochs", "1", "--batch-size", "8", "--output",
             "loss"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--output loss: model 'mlp' has outputs logits, probabilities"));
}

// Argument errors need no server: they are caught before any call.
TEST(ReplicactlTrainArgsTest, MissingOrBadArguments) {
  const std::string data = ::testing::TempDir() + "/replicactl_args_data";
  std::filesystem::remove_all(data);
  std::filesystem::create_directories(data);
  WriteSplit(data, "train", 3);
  const std::vector<std::string> base = {"--server", "127.0.0.1:1", "train", "--model", "m"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return RunReplicactl(args);
  };

  CommandResult r = run({"--epochs", "1", "--batch-size", "8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--data is required"));

  r = run({"--data", data + "/absent", "--epochs", "1", "--batch-size", "8"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err,
              HasSubstr("replicactl: NOT_FOUND: --data " + data + "/absent: no such directory"));

  // The train split is there, the test split is not.
  r = run({"--data", data, "--epochs", "1", "--batch-size", "8"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("NOT_FOUND"), HasSubstr(data + "/t10k-images-idx3-ubyte.gz")));

  r = run({"--data", data, "--epochs", "0", "--batch-size", "8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--epochs 0: expected >= 1"));
  r = run({"--data", data, "--epochs", "1", "--batch-size", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--batch-size 0: expected >= 1"));
  r = run({"--data", data, "--epochs", "1", "--batch-size", "8", "--limit", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--limit 0: expected >= 1"));
  r = run({"--data", data, "--epochs", "x", "--batch-size", "8"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(ReplicactlTrainArgsTest, HelpStatesTheOrder) {
  CommandResult r = RunReplicactl({"train", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, AllOf(HasSubstr("std::mt19937_64(seed + e)"),
                           HasSubstr("j = g() % (i + 1); swap(order[i], order[j])")));
}

}  // namespace
}  // namespace replicad::client
