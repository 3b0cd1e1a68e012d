// Feeds replicad.v1 Predict and TrainStep requests to the gRPC door
// (ReplicadService over an in-process channel, in front of the serving core
// of FuzzDaemon). Input: one byte choosing the RPC (even: Predict, odd:
// TrainStep), then the serialized request. Predict's bytes go out as they
// are, whether protobuf parses them or not, to the door's wire walk
// (server/grpc/wire_request.h); TrainStep's only when they parse.
// Asserts: every answer comes within 10 s; Predict refuses exactly the bytes
// protobuf refuses, with INVALID_ARGUMENT, and its answer parses; a refusal
// has a request error code
// (never INTERNAL/UNKNOWN/DATA_LOSS) and a message bounded as BoundedMessage
// bounds it; a Predict answered OK names the model, returns the outputs
// asked for (all when none), each with raw size = product(shape) * 4 and the
// request's batch as dim 0, and slices that tile [0, batch); a TrainStep
// answered OK has a finite loss and samples = batch.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "fuzz/fuzz_daemon.h"
#include "replicad/v1/replicad.grpc.pb.h"
#include "server/error_message.h"
#include "server/grpc/replicad_service.h"

namespace replicad::fuzz {
namespace {

struct Door {
  Door()
      : service(FuzzDaemon::Get().core(), FuzzDaemon::Get().devices(),
                FuzzDaemon::Get().metrics()) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    if (server == nullptr) Violated("the in-process gRPC server did not start");
    std::shared_ptr<grpc::Channel> channel = server->InProcessChannel(grpc::ChannelArguments());
    stub = v1::Replicad::NewStub(channel);
    generic = std::make_unique<grpc::GenericStub>(channel);
  }

  // Sends `size` bytes at `data` to `method` as they are.
  grpc::Status CallRaw(const char* method, const char* data, size_t size, grpc::ByteBuffer* reply) {
    grpc::Slice slice(data, size);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status status;
    absl::Notification done;
    generic->UnaryCall(&context, method, grpc::StubOptions(), &request, reply, [&](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }

  ReplicadService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Replicad::Stub> stub;
  std::unique_ptr<grpc::GenericStub> generic;
};

Door& TheDoor() {
  static Door* door = new Door();
  return *door;
}

// The batch a request that passed validation had: dim 0 of its first input.
int64_t BatchOf(const google::protobuf::RepeatedPtrField<v1::Tensor>& inputs) {
  if (inputs.empty() || inputs[0].shape().empty()) Violated("accepted a request without a batch");
  return inputs[0].shape(0);
}

void CheckPredict(const v1::PredictRequest& request, const v1::PredictResponse& response) {
  if (response.model() != FuzzDaemon::kModelName) Violated("Predict answered for another model");
  const int64_t batch = BatchOf(request.inputs());
  const std::set<std::string> asked(request.output_names().begin(), request.output_names().end());
  const size_t expected = asked.empty() ? 2 : asked.size();
  if (static_cast<size_t>(response.outputs_size()) != expected) {
    Violated(absl::StrCat("Predict returned ", response.outputs_size(), " outputs, expected ",
                          expected));
  }
  for (const v1::Tensor& out : response.outputs()) {
    if (!asked.empty() && !asked.count(out.name()))
      Violated("Predict returned an output not asked for");
    const std::vector<int64_t> shape(out.shape().begin(), out.shape().end());
    if (shape.empty() || shape[0] != batch) Violated("Predict output's dim 0 is not the batch");
    if (ByteCount(shape, 4) != static_cast<int64_t>(out.raw().size())) {
      Violated(absl::StrCat("Predict output '", out.name(), "' holds ", out.raw().size(),
                            " bytes for its shape"));
    }
  }
  int64_t next = 0;
  for (const v1::SliceInfo& slice : response.slices()) {
    if (slice.begin() != next || slice.end() <= slice.begin()) {
      Violated("Predict slices do not tile the batch");
    }
    next = slice.end();
  }
  if (next != batch) Violated("Predict slices do not cover the batch");
}

void CheckTrainStep(const v1::TrainStepRequest& request, const v1::TrainStepResponse& response) {
  if (!response.skipped().empty()) return;
  if (!std::isfinite(response.loss())) {
    Violated(absl::StrCat("TrainStep answered OK with loss ", response.loss()));
  }
  if (response.samples() != BatchOf(request.inputs())) {
    Violated("TrainStep's samples differ from the batch");
  }
}

}  // namespace
}  // namespace replicad::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad;
  using namespace replicad::fuzz;
  if (size < 1) return 0;
  Door& door = TheDoor();
  const bool train = data[0] & 1;
  const auto* body = reinterpret_cast<const char*>(data + 1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!train) {
    v1::PredictRequest request;
    const bool parses = request.ParseFromArray(body, static_cast<int>(size - 1));
    grpc::ByteBuffer reply;
    const grpc::Status status =
        door.CallRaw("/replicad.v1.Replicad/Predict", body, size - 1, &reply);
    if (!status.ok()) {
      CheckRefusal(status, "Predict");
      if (!parses && status.error_code() != grpc::StatusCode::INVALID_ARGUMENT) {
        Violated(absl::StrCat("Predict refused bytes protobuf refuses with code ",
                              status.error_code(), ", not INVALID_ARGUMENT"));
      }
      return 0;
    }
    if (!parses) Violated("Predict accepted bytes protobuf refuses");
    v1::PredictResponse response;
    grpc::ProtoBufferReader reader(&reply);
    if (!response.ParseFromZeroCopyStream(&reader)) Violated("Predict's answer does not parse");
    CheckPredict(request, response);
  } else {
    v1::TrainStepRequest request;
    if (!request.ParseFromArray(body, static_cast<int>(size - 1))) return 0;
    v1::TrainStepResponse response;
    const grpc::Status status = door.stub->TrainStep(&context, request, &response);
    if (!status.ok()) {
      CheckRefusal(status, "TrainStep");
      return 0;
    }
    CheckTrainStep(request, response);
  }
  return 0;
}
