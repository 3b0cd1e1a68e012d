#include "server/grpc/inference_service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc/call_context.h"
#include "server/grpc/unary_call.h"
#include "server/inference_protocol.h"

namespace replicad {
namespace {

using Parameters = google::protobuf::Map<std::string, inference::InferParameter>;

// Parameters replicad does not honour are tolerated, as the protocol asks,
// except those whose meaning the answer would silently ignore.
absl::Status CheckUnsupportedParameters(const Parameters& parameters, const std::string& field) {
  for (const char* name : {"shared_memory_region", "classification"}) {
    if (parameters.count(name)) {
      return absl::UnimplementedError(absl::StrCat(
          field, ".parameters.", name, ": not supported by replicad yet (see README)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> IntegerParameter(const inference::InferParameter& p,
                                         const std::string& field) {
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kInt64Param:
      if (p.int64_param() >= 0) return p.int64_param();
      break;
    case inference::InferParameter::kUint64Param:
      return static_cast<int64_t>(std::min<uint64_t>(p.uint64_param(), INT64_MAX));
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": expected a non-negative integer, received ", p.ShortDebugString()));
}

// Triton's request parameters for the core: "priority" and "timeout"
// (microseconds, tightening the gRPC deadline).
absl::Status ApplyRequestParameters(const Parameters& parameters, RequestContext* context) {
  if (auto it = parameters.find("priority"); it != parameters.end()) {
    absl::StatusOr<int64_t> priority = IntegerParameter(it->second, "parameters.priority");
    if (!priority.ok()) return priority.status();
    context->priority = static_cast<uint64_t>(*priority);
  }
  if (auto it = parameters.find("timeout"); it != parameters.end()) {
    absl::StatusOr<int64_t> timeout = IntegerParameter(it->second, "parameters.timeout");
    if (!timeout.ok()) return timeout.status();
    if (*timeout > 0) {
      context->deadline = std::min(context->deadline, absl::Now() + absl::Microseconds(*timeout));
    }
  }
  return absl::OkStatus();
}

// One input's bytes: raw_input_contents[i], or its typed contents.
absl::StatusOr<RequestInput> DecodeInput(const inference::ModelInferRequest& request, int i) {
  const inference::ModelInferRequest::InferInputTensor& t = request.inputs(i);
  const std::string field = absl::StrCat("inputs[", i, "] '", t.name(), "'");
  absl::StatusOr<DType> dtype = DTypeFromDatatype(t.datatype(), field + ".datatype");
  if (!dtype.ok()) return dtype.status();
  if (absl::Status s = CheckUnsupportedParameters(t.parameters(), field); !s.ok()) return s;
  RequestInput input{t.name(), *dtype, Shape(t.shape().begin(), t.shape().end()), nullptr, 0};
  const inference::InferTensorContents& contents = t.contents();
  const size_t typed = static_cast<size_t>(contents.fp32_contents_size()) +
                       contents.int64_contents_size() + contents.int_contents_size() +
                       contents.uint_contents_size() + contents.uint64_contents_size() +
                       contents.fp64_contents_size() + contents.bool_contents_size() +
                       contents.bytes_contents_size();
  if (request.raw_input_contents_size() > 0) {
    if (typed > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": contents and raw_input_contents are both given; send one of them"));
    }
    const std::string& raw = request.raw_input_contents(i);
    input.data = raw.data();
    input.bytes = raw.size();
  } else if (*dtype == DType::kFloat32) {
    if (typed != static_cast<size_t>(contents.fp32_contents_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".contents: expected fp32_contents for datatype FP32"));
    }
    input.data = contents.fp32_contents().data();
    input.bytes = contents.fp32_contents_size() * sizeof(float);
  } else {
    if (typed != static_cast<size_t>(contents.int64_contents_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".contents: expected int64_contents for datatype INT64"));
    }
    input.data = contents.int64_contents().data();
    input.bytes = contents.int64_contents_size() * sizeof(int64_t);
  }
  return input;
}

absl::StatusOr<InferRequest> DecodeInfer(const inference::ModelInferRequest& request) {
  InferRequest infer;
  infer.model = request.model_name();
  infer.model_field = "model_name";
  infer.outputs_field = "outputs";
  absl::StatusOr<int64_t> version = ParseModelVersion(request.model_version(), "model_version");
  if (!version.ok()) return version.status();
  infer.version = *version;
  if (request.raw_input_contents_size() > 0 &&
      request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents: expected one entry per input (", request.inputs_size(),
        "), received ", request.raw_input_contents_size()));
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    absl::StatusOr<RequestInput> input = DecodeInput(request, i);
    if (!input.ok()) return input.status();
    infer.inputs.push_back(*std::move(input));
  }
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& output = request.outputs(i);
    if (absl::Status s = CheckUnsupportedParameters(
            output.parameters(), absl::StrCat("outputs[", i, "] '", output.name(), "'"));
        !s.ok()) {
      return s;
    }
    infer.outputs.push_back(output.name());
  }
  return infer;
}

// Writes every output as raw_output_contents, the protocol's compact form.
class RawOutputs : public ResponseWriter {
 public:
  explicit RawOutputs(inference::ModelInferResponse* response) : response_(response) {}

  absl::StatusOr<void*> AddOutput(const TensorSpec& spec, const TensorType& type) override {
    inference::ModelInferResponse::InferOutputTensor* tensor = response_->add_outputs();
    tensor->set_name(spec.name);
    tensor->set_datatype(DatatypeOf(type.dtype));
    for (int64_t d : type.shape) tensor->add_shape(d);
    std::string* raw = response_->add_raw_output_contents();
    raw->resize(ByteSize(type));
    return raw->data();
  }

 private:
  inference::ModelInferResponse* response_;
};

// ModelStreamInfer's reactor. It owns the requests read so far and the
// answers not yet written; gRPC deletes it (OnDone) only after Finish, which
// waits for every inference it started.
class StreamInfer final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamInfer(grpc::CallbackServerContext* context, ServingCore& core, ServerMetrics& metrics)
      : context_(context), core_(core), metrics_(metrics) {
    ReadNext();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client closed its side (or went away).
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    std::unique_ptr<Exchange> exchange = std::move(reading_);
    {
      absl::MutexLock lock(&mu_);
      ++running_;
    }
    ReadNext();
    Run(std::move(exchange));
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writes_.pop_front();
    writing_ = false;
    if (!ok) writes_.clear();  // The client is gone; nothing more can be written.
    WriteNextLocked();
    MaybeFinishLocked();
  }

  void OnDone() override { delete this; }

 private:
  // One request read from the stream and its answer.
  struct Exchange {
    inference::ModelInferRequest request;
    inference::ModelStreamInferResponse response;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  };

  void ReadNext() {
    reading_ = std::make_unique<Exchange>();
    StartRead(&reading_->request);
  }

  void Run(std::unique_ptr<Exchange> exchange) {
    const inference::ModelInferRequest& request = exchange->request;
    RequestContext context = ContextOf(context_, request.id());
    absl::Status decoded = ApplyRequestParameters(request.parameters(), &context);
    absl::StatusOr<InferRequest> infer =
        decoded.ok() ? DecodeInfer(request) : absl::StatusOr<InferRequest>(decoded);
    if (!infer.ok()) return Answer(std::move(exchange), infer.status(), "");
    auto writer = std::make_shared<RawOutputs>(exchange->response.mutable_infer_response());
    core_.Infer(*std::move(infer), std::move(context), writer.get(),
                [this, writer, exchange = std::move(exchange)](
                    absl::Status status, ServingCore::InferAnswer answer) mutable {
                  inference::ModelInferResponse* response =
                      exchange->response.mutable_infer_response();
                  if (status.ok()) {
                    response->set_model_name(answer.model->name);
                    response->set_model_version(absl::StrCat(answer.model->version));
                    response->set_id(exchange->request.id());
                  }
                  Answer(std::move(exchange), status,
                         answer.model != nullptr ? answer.model->name : "");
                });
  }

  // Queues the answer (or the error, as the stream's error_message) for writing.
  void Answer(std::unique_ptr<Exchange> exchange, const absl::Status& status,
              const std::string& model) {
    metrics_.RecordRequest(model, "ModelStreamInfer", status,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                         exchange->start)
                               .count());
    if (!status.ok()) {
      exchange->response.Clear();
      exchange->response.set_error_message(
          absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message()));
      exchange->response.mutable_infer_response()->set_id(exchange->request.id());
    }
    absl::MutexLock lock(&mu_);
    --running_;
    writes_.push_back(std::move(exchange));
    WriteNextLocked();
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || writes_.empty()) return;
    writing_ = true;
    StartWrite(&writes_.front()->response);
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || running_ > 0 || writing_ || !writes_.empty()) return;
    finished_ = true;
    Finish(grpc::Status::OK);
  }

  grpc::CallbackServerContext* const context_;
  ServingCore& core_;
  ServerMetrics& metrics_;
  std::unique_ptr<Exchange> reading_;  // Only touched by the read callbacks, one at a time.
  absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::unique_ptr<Exchange>> writes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

InferenceService::InferenceService(ServingCore& core, ServerMetrics& metrics)
    : core_(core), metrics_(metrics) {}

absl::StatusOr<std::shared_ptr<LoadedModel>> InferenceService::Find(
    const std::string& name, const std::string& version) const {
  absl::StatusOr<int64_t> number = ParseModelVersion(version, "version");
  if (!number.ok()) return number.status();
  return core_.FindModel(name, *number, "name");
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  UnaryCall call(context, metrics_, "ServerLive");
  response->set_live(true);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  UnaryCall call(context, metrics_, "ServerReady");
  response->set_ready(core_.ServerReady());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  UnaryCall call(context, metrics_, "ModelReady");
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version(), "version");
  if (!version.ok()) return call.Finish(version.status());
  response->set_ready(core_.ModelReady(request->name(), *version).ok());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  UnaryCall call(context, metrics_, "ServerMetadata");
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  for (const std::string& e : SupportedExtensions()) response->add_extensions(e);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  UnaryCall call(context, metrics_, "ModelMetadata");
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = Find(request->name(), request->version());
  if (!model.ok()) return call.Finish(model.status());
  std::vector<std::shared_ptr<LoadedModel>> versions;
  for (auto& v : core_.models().Ready()) {
    if (v->name == (*model)->name) versions.push_back(std::move(v));
  }
  FillModelMetadata(versions, **model, response);
  return call.Finish(absl::OkStatus(), (*model)->name);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(grpc::CallbackServerContext* context,
                                                        const inference::ModelConfigRequest* request,
                                                        inference::ModelConfigResponse* response) {
  UnaryCall call(context, metrics_, "ModelConfig");
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = Find(request->name(), request->version());
  if (!model.ok()) return call.Finish(model.status());
  FillModelConfig(**model, response->mutable_config());
  return call.Finish(absl::OkStatus(), (*model)->name);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  UnaryCall call(context, metrics_, "ModelStatistics");
  if (request->name().empty()) {
    for (const auto& model : core_.models().Ready()) {
      FillModelStatistics(*model, response->add_model_stats());
    }
    return call.Finish(absl::OkStatus());
  }
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = Find(request->name(), request->version());
  if (!model.ok()) return call.Finish(model.status());
  FillModelStatistics(**model, response->add_model_stats());
  return call.Finish(absl::OkStatus(), (*model)->name);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  UnaryCall call(context, metrics_, "ModelInfer");
  RequestContext request_context = ContextOf(context, request->id());
  if (absl::Status s = ApplyRequestParameters(request->parameters(), &request_context); !s.ok()) {
    return call.Finish(s);
  }
  absl::StatusOr<InferRequest> infer = DecodeInfer(*request);
  if (!infer.ok()) return call.Finish(infer.status());
  auto writer = std::make_shared<RawOutputs>(response);
  core_.Infer(*std::move(infer), std::move(request_context), writer.get(),
              [call, writer, request, response](absl::Status status,
                                                ServingCore::InferAnswer answer) mutable {
                if (status.ok()) {
                  response->set_model_name(answer.model->name);
                  response->set_model_version(absl::StrCat(answer.model->version));
                  response->set_id(request->id());
                } else {
                  response->Clear();
                }
                call.Finish(status, answer.model != nullptr ? answer.model->name : "");
              });
  return call.reactor();
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamInfer(context, core_, metrics_);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  UnaryCall call(context, metrics_, "RepositoryIndex");
  FillRepositoryIndex(core_.models().Index(), request->ready(), response);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  UnaryCall call(context, metrics_, "RepositoryModelLoad");
  // Loading from a config or files sent with the request is a Triton
  // extension replicad does not have: refuse it rather than load the
  // repository's version in its place.
  if (!request->parameters().empty()) {
    return call.Finish(absl::UnimplementedError(absl::StrCat(
        "parameters.", request->parameters().begin()->first,
        ": loading with an override configuration or files is not supported; "
        "ModelLoad loads the repository's model")));
  }
  core_.LoadModel(request->model_name(),
                  [call](absl::Status status) mutable { call.Finish(status); });
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  UnaryCall call(context, metrics_, "RepositoryModelUnload");
  core_.UnloadModel(request->model_name(),
                    [call](absl::Status status) mutable { call.Finish(status); });
  return call.reactor();
}

}  // namespace replicad
