// Feeds Open Inference Protocol requests to the gRPC door (InferenceService
// over an in-process channel, in front of the serving core of FuzzDaemon,
// with system shared memory on and no region registered). Input: one byte
// choosing the RPC (mod 4: ModelInfer, ModelStreamInfer with that one
// request, ModelMetadata, ModelConfig), then the serialized request.
// ModelInfer's bytes go out as they are, whether protobuf parses them or
// not, to the door's wire walk (server/grpc/wire_request.h); the other
// RPCs' only when they parse.
// Asserts: every answer comes within 10 s; ModelInfer refuses exactly the
// bytes protobuf refuses, with INVALID_ARGUMENT, and its answer parses; a
// refusal (the call's status, or
// a stream response's error_message) has a request error code and a bounded
// message; an inference answered OK echoes the id, names the model, returns
// the outputs asked for (all when none) with one raw_output_contents entry
// each, of product(shape) * 4 bytes, dim 0 being the request's batch; a
// stream answers its one request exactly once.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "fuzz/fuzz_daemon.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/error_message.h"
#include "server/grpc/inference_service.h"

namespace replicad::fuzz {
namespace {

struct Door {
  Door()
      : service(FuzzDaemon::Get().core(), FuzzDaemon::Get().metrics(),
                FuzzDaemon::Get().shared_memory()) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    if (server == nullptr) Violated("the in-process gRPC server did not start");
    std::shared_ptr<grpc::Channel> channel = server->InProcessChannel(grpc::ChannelArguments());
    stub = inference::GRPCInferenceService::NewStub(channel);
    generic = std::make_unique<grpc::GenericStub>(channel);
  }
  InferenceService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
  std::unique_ptr<grpc::GenericStub> generic;
};

Door& TheDoor() {
  static Door* door = new Door();
  return *door;
}

void CheckInfer(const inference::ModelInferRequest& request,
                const inference::ModelInferResponse& response) {
  if (response.model_name() != FuzzDaemon::kModelName) Violated("answered for another model");
  if (response.id() != request.id()) Violated("the response does not echo the request's id");
  if (request.inputs().empty() || request.inputs(0).shape().empty()) {
    Violated("accepted a request without a batch");
  }
  const int64_t batch = request.inputs(0).shape(0);
  std::set<std::string> asked;
  for (const auto& o : request.outputs()) asked.insert(o.name());
  const int expected = asked.empty() ? 2 : static_cast<int>(asked.size());
  if (response.outputs_size() != expected || response.raw_output_contents_size() != expected) {
    Violated(absl::StrCat(response.outputs_size(), " outputs and ",
                          response.raw_output_contents_size(), " raw contents; expected ",
                          expected));
  }
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& out = response.outputs(i);
    if (!asked.empty() && !asked.count(out.name())) Violated("an output not asked for");
    if (out.datatype() != "FP32") Violated(absl::StrCat("output datatype ", out.datatype()));
    const std::vector<int64_t> shape(out.shape().begin(), out.shape().end());
    if (shape.empty() || shape[0] != batch) Violated("an output's dim 0 is not the batch");
    if (ByteCount(shape, 4) != static_cast<int64_t>(response.raw_output_contents(i).size())) {
      Violated(absl::StrCat("output '", out.name(), "' holds ",
                            response.raw_output_contents(i).size(), " bytes for its shape"));
    }
  }
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return context;
}

template <typename Request>
bool Parse(const uint8_t* data, size_t size, Request* request) {
  return request->ParseFromArray(data, static_cast<int>(size));
}

void Infer(const uint8_t* data, size_t size) {
  inference::ModelInferRequest request;
  const bool parses = Parse(data, size, &request);
  grpc::Slice slice(data, size);
  grpc::ByteBuffer wire(&slice, 1), reply;
  std::unique_ptr<grpc::ClientContext> context = Context();
  grpc::Status status;
  absl::Notification done;
  TheDoor().generic->UnaryCall(context.get(), "/inference.GRPCInferenceService/ModelInfer",
                               grpc::StubOptions(), &wire, &reply, [&](grpc::Status s) {
                                 status = std::move(s);
                                 done.Notify();
                               });
  done.WaitForNotification();
  if (!status.ok()) {
    CheckRefusal(status, "ModelInfer");
    if (!parses && status.error_code() != grpc::StatusCode::INVALID_ARGUMENT) {
      Violated(absl::StrCat("ModelInfer refused bytes protobuf refuses with code ",
                            status.error_code(), ", not INVALID_ARGUMENT"));
    }
    return;
  }
  if (!parses) Violated("ModelInfer accepted bytes protobuf refuses");
  inference::ModelInferResponse response;
  grpc::ProtoBufferReader reader(&reply);
  if (!response.ParseFromZeroCopyStream(&reader)) Violated("ModelInfer's answer does not parse");
  CheckInfer(request, response);
}

void StreamInfer(const uint8_t* data, size_t size) {
  inference::ModelInferRequest request;
  if (!Parse(data, size, &request)) return;
  std::unique_ptr<grpc::ClientContext> context = Context();
  auto stream = TheDoor().stub->ModelStreamInfer(context.get());
  stream->Write(request);
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  int answers = 0;
  while (stream->Read(&response)) {
    ++answers;
    if (!response.error_message().empty()) {
      if (response.error_message().size() > kMaxRefusalMessage)
        Violated("long stream error message");
    } else {
      CheckInfer(request, response.infer_response());
    }
  }
  const grpc::Status status = stream->Finish();
  if (!status.ok()) return CheckRefusal(status, "ModelStreamInfer");
  if (answers != 1) Violated(absl::StrCat("a stream of one request got ", answers, " answers"));
}

void Metadata(const uint8_t* data, size_t size) {
  inference::ModelMetadataRequest request;
  if (!Parse(data, size, &request)) return;
  inference::ModelMetadataResponse response;
  const grpc::Status status = TheDoor().stub->ModelMetadata(Context().get(), request, &response);
  if (!status.ok()) return CheckRefusal(status, "ModelMetadata");
  if (response.name() != FuzzDaemon::kModelName || response.inputs_size() != 2) {
    Violated("ModelMetadata answered OK about something else");
  }
}

void Config(const uint8_t* data, size_t size) {
  inference::ModelConfigRequest request;
  if (!Parse(data, size, &request)) return;
  inference::ModelConfigResponse response;
  const grpc::Status status = TheDoor().stub->ModelConfig(Context().get(), request, &response);
  if (!status.ok()) return CheckRefusal(status, "ModelConfig");
  if (response.config().name() != FuzzDaemon::kModelName) {
    Violated("ModelConfig answered OK about something else");
  }
}

}  // namespace
}  // namespace replicad::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad::fuzz;
  if (size < 1) return 0;
  TheDoor();
  switch (data[0] % 4) {
    case 0:
      Infer(data + 1, size - 1);
      break;
    case 1:
      StreamInfer(data + 1, size - 1);
      break;
    case 2:
      Metadata(data + 1, size - 1);
      break;
    default:
      Config(data + 1, size - 1);
      break;
  }
  return 0;
}
