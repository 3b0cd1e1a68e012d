// The floor under any Open Inference Protocol server on this machine: a gRPC
// callback server (the same gRPC library and API as replicad's) that answers
// ModelInfer from memory, without a model, a scheduler or a slot. Its
// latency under perf_analyzer is what the transport, the protocol's
// encoding and the load generator cost by themselves, so replicad's own
// overhead per request is its latency minus compute minus this one.
//
// It takes what it answers from a running replicad (`--upstream`): the
// server and model metadata, the model's config and statistics once at
// start, and the response to the first ModelInfer it receives, which it
// forwards; every later ModelInfer gets that response with its own id.
//
//   grpc_floor_server --port 8101 --upstream 127.0.0.1:8001 --model default
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.grpc.pb.h"

namespace {

using G = inference::GRPCInferenceService;
using Base = G::WithCallbackMethod_ServerLive<
    G::WithCallbackMethod_ServerReady<G::WithCallbackMethod_ModelReady<
        G::WithCallbackMethod_ServerMetadata<G::WithCallbackMethod_ModelMetadata<
            G::WithCallbackMethod_ModelConfig<G::WithCallbackMethod_ModelStatistics<
                G::WithCallbackMethod_ModelInfer<G::Service>>>>>>>>;

grpc::ServerUnaryReactor* Answered(grpc::CallbackServerContext* context,
                                   grpc::Status status = grpc::Status::OK) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

class FloorService final : public Base {
 public:
  FloorService(std::unique_ptr<G::Stub> upstream, const std::string& model)
      : upstream_(std::move(upstream)) {
    Fetch("ServerMetadata", [&](grpc::ClientContext* c) {
      return upstream_->ServerMetadata(c, {}, &server_metadata_);
    });
    inference::ModelMetadataRequest metadata;
    metadata.set_name(model);
    Fetch("ModelMetadata", [&](grpc::ClientContext* c) {
      return upstream_->ModelMetadata(c, metadata, &model_metadata_);
    });
    inference::ModelConfigRequest config;
    config.set_name(model);
    Fetch("ModelConfig",
          [&](grpc::ClientContext* c) { return upstream_->ModelConfig(c, config, &config_); });
    inference::ModelStatisticsRequest statistics;
    statistics.set_name(model);
    Fetch("ModelStatistics", [&](grpc::ClientContext* c) {
      return upstream_->ModelStatistics(c, statistics, &statistics_);
    });
  }

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return Answered(context);
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    response->set_ready(true);
    return Answered(context);
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest*,
                                       inference::ModelReadyResponse* response) override {
    response->set_ready(true);
    return Answered(context);
  }
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* response) override {
    *response = server_metadata_;
    return Answered(context);
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest*,
                                          inference::ModelMetadataResponse* response) override {
    *response = model_metadata_;
    return Answered(context);
  }
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest*,
                                        inference::ModelConfigResponse* response) override {
    *response = config_;
    return Answered(context);
  }
  // The requests answered, each taking no time in a queue or a model.
  // perf_analyzer does not find the model's version in these without a
  // duration that moved: name it (`-x 1`, as perf_analyzer_bench.py does).
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest*,
                                            inference::ModelStatisticsResponse* response) override {
    *response = statistics_;
    const uint64_t answered = answered_.load();
    for (inference::ModelStatistics& model : *response->mutable_model_stats()) {
      model.set_inference_count(answered);
      model.set_execution_count(answered);
      model.mutable_inference_stats()->mutable_success()->set_count(answered);
    }
    return Answered(context);
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (!have_answer_) {
      // Once, blocking this thread: the first request is not measured.
      grpc::ClientContext upstream_context;
      grpc::Status status = upstream_->ModelInfer(&upstream_context, *request, &answer_);
      if (!status.ok()) return Answered(context, status);
      have_answer_ = true;
    }
    *response = answer_;
    response->set_id(request->id());
    answered_.fetch_add(1);
    return Answered(context);
  }

 private:
  template <typename Call>
  void Fetch(const char* what, Call call) {
    grpc::ClientContext context;
    grpc::Status status = call(&context);
    if (!status.ok()) {
      std::fprintf(stderr, "grpc_floor_server: %s from upstream: %s\n", what,
                   status.error_message().c_str());
      std::exit(1);
    }
  }

  std::unique_ptr<G::Stub> upstream_;
  inference::ServerMetadataResponse server_metadata_;
  inference::ModelMetadataResponse model_metadata_;
  inference::ModelConfigResponse config_;
  inference::ModelStatisticsResponse statistics_;
  std::atomic<uint64_t> answered_{0};
  absl::Mutex mu_;
  bool have_answer_ ABSL_GUARDED_BY(mu_) = false;
  inference::ModelInferResponse answer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A gRPC inference server that answers from memory: the floor under any server"};
  int port = 0;
  std::string upstream, model = "default";
  app.add_option("--port", port, "port to listen on (127.0.0.1)")->required();
  app.add_option("--upstream", upstream, "a running replicad's gRPC address")->required();
  app.add_option("--model", model, "the model whose answers to serve");
  CLI11_PARSE(app, argc, argv);

  FloorService service(
      G::NewStub(grpc::CreateChannel(upstream, grpc::InsecureChannelCredentials())), model);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::fprintf(stderr, "grpc_floor_server: cannot listen on port %d\n", port);
    return 1;
  }
  std::printf("listening on 127.0.0.1:%d\n", port);
  std::fflush(stdout);
  server->Wait();
  return 0;
}
