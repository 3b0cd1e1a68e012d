#include "server/grpc/inference_service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/base/client_text.h"
#include "core/base/clock.h"
#include "core/base/status_macros.h"
#include "server/error_message.h"
#include "server/grpc/call_context.h"
#include "server/grpc/unary_call.h"
#include "server/grpc/wire_request.h"
#include "server/grpc/wire_response.h"
#include "server/inference_protocol.h"
#include "server/inference_request.h"

namespace replicad {
namespace {

// Where a request's tensor bytes are: in its message (the stream), or taken
// out of it by ReadModelInferRequest (the unary call).
struct TensorBytes {
  std::vector<absl::string_view> raw_input_contents;
  // Per input: its fp32_contents' and int64_contents' bytes.
  std::vector<absl::string_view> fp32, int64;
};

absl::string_view BytesOfRepeated(const void* data, size_t bytes) {
  return absl::string_view(static_cast<const char*>(data), bytes);
}

TensorBytes BytesIn(const inference::ModelInferRequest& request) {
  TensorBytes bytes;
  for (const std::string& raw : request.raw_input_contents()) {
    bytes.raw_input_contents.push_back(raw);
  }
  for (const auto& input : request.inputs()) {
    const inference::InferTensorContents& c = input.contents();
    bytes.fp32.push_back(
        BytesOfRepeated(c.fp32_contents().data(), c.fp32_contents_size() * sizeof(float)));
    bytes.int64.push_back(
        BytesOfRepeated(c.int64_contents().data(), c.int64_contents_size() * sizeof(int64_t)));
  }
  return bytes;
}

TensorBytes BytesIn(const WireInferRequest& request) {
  TensorBytes bytes;
  for (const auto& raw : request.raw_input_contents) {
    bytes.raw_input_contents.push_back(BytesOf(raw));
  }
  for (const auto& fp32 : request.fp32_contents) bytes.fp32.push_back(BytesOf(fp32));
  for (const auto& int64 : request.int64_contents) bytes.int64.push_back(BytesOf(int64));
  return bytes;
}

// One input's bytes as the request carries them: raw_input_contents[i], or
// its typed contents; none when it names a shared-memory region instead.
// Its fp32 and int64 contents are read from `bytes`, never from `request`.
absl::StatusOr<WireBytes> InputBytes(const inference::ModelInferRequest& request,
                                     const TensorBytes& bytes, int i) {
  const inference::ModelInferRequest::InferInputTensor& t = request.inputs(i);
  const std::string field = absl::StrCat("inputs[", i, "] '", ClientText(t.name()), "'");
  REPLICAD_ASSIGN_OR_RETURN(DType dtype, DTypeFromDatatype(t.datatype(), field + ".datatype"));
  const inference::InferTensorContents& contents = t.contents();
  const size_t fp32 = bytes.fp32[i].size() / sizeof(float);
  const size_t int64 = bytes.int64[i].size() / sizeof(int64_t);
  const size_t typed = fp32 + int64 + contents.int_contents_size() + contents.uint_contents_size() +
                       contents.uint64_contents_size() + contents.fp64_contents_size() +
                       contents.bool_contents_size() + contents.bytes_contents_size();
  if (!bytes.raw_input_contents.empty()) {
    if (typed > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": contents and raw_input_contents are both given; send one of them"));
    }
    const absl::string_view raw = bytes.raw_input_contents[i];
    return WireBytes{raw.data(), raw.size(), true};
  }
  if (typed == 0) return WireBytes{};
  if (dtype != DType::kFloat32 && dtype != DType::kInt64) {
    return absl::UnimplementedError(
        absl::StrCat(field, ".contents: typed contents are read for FP32 and INT64; send datatype ",
                     DatatypeOf(dtype), " in raw_input_contents"));
  }
  if (dtype == DType::kFloat32) {
    if (typed != fp32) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".contents: expected fp32_contents for datatype FP32"));
    }
    return WireBytes{bytes.fp32[i].data(), bytes.fp32[i].size(), true};
  }
  if (typed != int64) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".contents: expected int64_contents for datatype INT64"));
  }
  return WireBytes{bytes.int64[i].data(), bytes.int64[i].size(), true};
}

absl::StatusOr<DecodedInfer> DecodeInfer(const inference::ModelInferRequest& request,
                                         const TensorBytes& bytes,
                                         const SharedMemoryRegistry* shared_memory,
                                         RequestContext* context) {
  // Shared memory also counts: an input may have no raw entry only when none has.
  const size_t raw_entries = bytes.raw_input_contents.size();
  if (raw_entries > 0 && raw_entries != static_cast<size_t>(request.inputs_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents: expected one entry per input (", request.inputs_size(),
                     "), received ", raw_entries));
  }
  std::vector<WireBytes> inputs;
  for (int i = 0; i < request.inputs_size(); ++i) {
    REPLICAD_ASSIGN_OR_RETURN(WireBytes input, InputBytes(request, bytes, i));
    inputs.push_back(input);
  }
  return DecodeInferRequest(request, inputs, shared_memory, context);
}

// An output's entry in `response`: name, datatype, shape, and the region it
// was placed in, if any.
void AddOutputTensor(const TensorSpec& spec, const TensorType& type, const TensorRegion* region,
                     inference::ModelInferResponse* response) {
  inference::ModelInferResponse::InferOutputTensor* tensor = response->add_outputs();
  tensor->set_name(spec.name);
  tensor->set_datatype(DatatypeOf(type.dtype));
  for (int64_t d : type.shape) tensor->add_shape(d);
  if (region != nullptr) {
    auto& parameters = *tensor->mutable_parameters();
    parameters["shared_memory_region"].set_string_param(region->region);
    parameters["shared_memory_byte_size"].set_int64_param(ByteSize(type));
    if (region->offset > 0) {
      parameters["shared_memory_offset"].set_int64_param(static_cast<int64_t>(region->offset));
    }
  }
}

// Writes every output as raw_output_contents, the protocol's compact form;
// one placed in shared memory gets an empty entry, so that entries stay
// aligned with outputs, and its region in its parameters.
class RawOutputs : public InferOutputs {
 public:
  RawOutputs(std::map<std::string, TensorRegion> regions, inference::ModelInferResponse* response)
      : InferOutputs(std::move(regions)), response_(response) {}

 private:
  absl::StatusOr<void*> Place(const TensorSpec& spec, const TensorType& type,
                              const TensorRegion* region) override {
    AddOutputTensor(spec, type, region, response_);
    std::string* raw = response_->add_raw_output_contents();
    if (region != nullptr) return nullptr;
    raw->resize(ByteSize(type));
    return raw->data();
  }

  inference::ModelInferResponse* response_;
};

// RawOutputs' answer with its bytes borrowed: each output not placed in
// shared memory is written into a pooled buffer (not zero-filled first),
// which the response's raw_output_contents entry then borrows.
class PooledOutputs : public InferOutputs {
 public:
  PooledOutputs(std::map<std::string, TensorRegion> regions, std::shared_ptr<HostBufferPool> pool)
      : InferOutputs(std::move(regions)), pool_(std::move(pool)) {}

  // The response, naming the model (and version) that answered and the request's id.
  grpc::ByteBuffer Encode(const std::string& model, int64_t version, const std::string& id) {
    head_.set_model_name(model);
    head_.set_model_version(absl::StrCat(version));
    head_.set_id(id);
    return EncodeModelInferResponse(head_, raw_);
  }

 private:
  absl::StatusOr<void*> Place(const TensorSpec& spec, const TensorType& type,
                              const TensorRegion* region) override {
    std::shared_ptr<HostBuffer>& raw = raw_.emplace_back();
    if (region == nullptr) {
      absl::StatusOr<std::shared_ptr<HostBuffer>> buffer = pool_->Get(ByteSize(type));
      if (!buffer.ok()) return buffer.status();
      raw = *std::move(buffer);
    }
    AddOutputTensor(spec, type, region, &head_);
    return raw != nullptr ? static_cast<void*>(raw->data()) : nullptr;
  }

  const std::shared_ptr<HostBufferPool> pool_;
  // Without raw_output_contents: raw_[j] is entry j (null for shared memory).
  inference::ModelInferResponse head_;
  std::vector<std::shared_ptr<HostBuffer>> raw_;
};

// A stream the caller may not open: answered with its status at once.
class RefusedStream final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                           inference::ModelStreamInferResponse> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// ModelStreamInfer's reactor. It owns the requests read so far and the
// answers not yet written; gRPC deletes it (OnDone) only after Finish, which
// waits for every inference it started.
class StreamInfer final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                         inference::ModelStreamInferResponse> {
 public:
  StreamInfer(grpc::CallbackServerContext* context, ServingCore& core, ServerMetrics& metrics,
              const SharedMemoryRegistry* shared_memory)
      : context_(context), core_(core), metrics_(metrics), shared_memory_(shared_memory) {
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
    absl::StatusOr<DecodedInfer> decoded =
        DecodeInfer(request, BytesIn(request), shared_memory_, &context);
    if (!decoded.ok()) return Answer(std::move(exchange), decoded.status(), "");
    auto writer = std::make_shared<RawOutputs>(std::move(decoded->output_regions),
                                               exchange->response.mutable_infer_response());
    writer->HoldInputs(std::move(decoded->inputs));
    core_.Infer(
        std::move(decoded->request), std::move(context), writer.get(),
        [this, writer, exchange = std::move(exchange)](absl::Status status,
                                                       ServingCore::InferAnswer answer) mutable {
          inference::ModelInferResponse* response = exchange->response.mutable_infer_response();
          if (status.ok()) status = writer->FinishRegions();
          if (status.ok()) {
            response->set_model_name(answer.model->name);
            response->set_model_version(absl::StrCat(answer.model->version));
            response->set_id(exchange->request.id());
          }
          Answer(std::move(exchange), status, answer.model != nullptr ? answer.model->name : "");
        });
  }

  // Queues the answer (or the error, as the stream's error_message) for writing.
  void Answer(std::unique_ptr<Exchange> exchange, const absl::Status& status,
              const std::string& model) {
    metrics_.RecordRequest(model, "ModelStreamInfer", status, SecondsSince(exchange->start));
    if (!status.ok()) {
      exchange->response.Clear();
      exchange->response.set_error_message(absl::StrCat(absl::StatusCodeToString(status.code()),
                                                        ": ", BoundedMessage(status.message())));
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
  const SharedMemoryRegistry* const shared_memory_;
  std::unique_ptr<Exchange> reading_;  // Only touched by the read callbacks, one at a time.
  absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::unique_ptr<Exchange>> writes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

InferenceService::InferenceService(ServingCore& core, ServerMetrics& metrics,
                                   SharedMemoryRegistry* shared_memory, const AccessTokens* tokens,
                                   std::shared_ptr<HostBufferPool> buffers, ModelUploads* uploads)
    : core_(core),
      metrics_(metrics),
      tokens_(tokens),
      shared_memory_(shared_memory),
      uploads_(uploads),
      buffers_(buffers != nullptr
                   ? std::move(buffers)
                   : std::make_shared<HostBufferPool>(HostBufferPool::kDefaultIdleBytes)) {}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  UnaryCall call(context, metrics_, "ServerLive", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  response->set_live(true);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  UnaryCall call(context, metrics_, "ServerReady", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  response->set_ready(core_.ServerReady());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  UnaryCall call(context, metrics_, "ModelReady", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version(), "version");
  if (!version.ok()) return call.Finish(version.status());
  response->set_ready(core_.ModelReady(request->name(), *version).ok());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  UnaryCall call(context, metrics_, "ServerMetadata", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  AnswerServerMetadata(shared_memory_, response);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  UnaryCall call(context, metrics_, "ModelMetadata", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<std::shared_ptr<LoadedModel>> model =
      AnswerModelMetadata(core_, request->name(), request->version(), response);
  return call.Finish(model.status(), model.ok() ? (*model)->name : "");
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  UnaryCall call(context, metrics_, "ModelConfig", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<std::shared_ptr<LoadedModel>> model =
      AnswerModelConfig(core_, request->name(), request->version(), response->mutable_config());
  return call.Finish(model.status(), model.ok() ? (*model)->name : "");
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  UnaryCall call(context, metrics_, "ModelStatistics", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<std::shared_ptr<LoadedModel>> model =
      AnswerModelStatistics(core_, request->name(), request->version(), response);
  return call.Finish(model.status(), model.ok() && *model ? (*model)->name : "");
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* wire,
                                                       grpc::ByteBuffer* response) {
  UnaryCall call(context, metrics_, "ModelInfer", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<WireInferRequest> request = ReadModelInferRequest(*wire, *buffers_);
  if (!request.ok()) return call.Finish(request.status());
  RequestContext request_context = ContextOf(context, request->message.id());
  absl::StatusOr<DecodedInfer> decoded =
      DecodeInfer(request->message, BytesIn(*request), shared_memory_, &request_context);
  if (!decoded.ok()) return call.Finish(decoded.status());
  auto writer = std::make_shared<PooledOutputs>(std::move(decoded->output_regions), buffers_);
  writer->HoldInputs(std::move(decoded->inputs));
  // The inputs view the request's buffers: they go with the done callback.
  core_.Infer(std::move(decoded->request), std::move(request_context), writer.get(),
              [call, writer, request = *std::move(request), response](
                  absl::Status status, ServingCore::InferAnswer answer) mutable {
                if (status.ok()) status = writer->FinishRegions();
                if (status.ok()) {
                  *response = writer->Encode(answer.model->name, answer.model->version,
                                             request.message.id());
                }
                call.Finish(status, answer.model != nullptr ? answer.model->name : "");
              });
  return call.reactor();
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  if (absl::Status access = CheckAccess(context, tokens_, "ModelStreamInfer"); !access.ok()) {
    metrics_.RecordRequest("", "ModelStreamInfer", access, 0);
    return new RefusedStream(access);
  }
  return new StreamInfer(context, core_, metrics_, shared_memory_);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  UnaryCall call(context, metrics_, "RepositoryIndex", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  FillRepositoryIndex(core_.models().Index(), request->ready(), response);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  UnaryCall call(context, metrics_, "RepositoryModelLoad", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<ModelUpload> upload =
      UploadOfParameters(request->model_name(), request->parameters());
  if (!upload.ok()) return call.Finish(upload.status());
  LoadModelOrUpload(core_, uploads_, *std::move(upload),
                    [call](absl::Status status) mutable { call.Finish(status); });
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  UnaryCall call(context, metrics_, "RepositoryModelUnload", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  core_.UnloadModel(request->model_name(),
                    [call](absl::Status status) mutable { call.Finish(status); });
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  UnaryCall call(context, metrics_, "SystemSharedMemoryStatus", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<SharedMemoryRegistry*> registry = SystemSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Finish(registry.status());
  return call.Finish(FillSharedMemoryStatus(**registry, request->name(), response));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  UnaryCall call(context, metrics_, "SystemSharedMemoryRegister", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<SharedMemoryRegistry*> registry = SystemSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Finish(registry.status());
  return call.Finish((*registry)->Register(request->name(), request->key(), request->offset(),
                                           request->byte_size()));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  UnaryCall call(context, metrics_, "SystemSharedMemoryUnregister", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<SharedMemoryRegistry*> registry = SystemSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Finish(registry.status());
  return call.Finish((*registry)->Unregister(request->name()));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  UnaryCall call(context, metrics_, "CudaSharedMemoryStatus", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<SharedMemoryRegistry*> registry = CudaSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Finish(registry.status());
  return call.Finish(FillCudaSharedMemoryStatus(**registry, request->name(), response));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse*) {
  UnaryCall call(context, metrics_, "CudaSharedMemoryRegister", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<SharedMemoryRegistry*> registry = CudaSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Finish(registry.status());
  // raw_handle holds the handle's own bytes (tritonclient decodes its base64).
  return call.Finish((*registry)->RegisterCuda(request->name(), request->raw_handle(),
                                               request->device_id(), request->byte_size()));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse*) {
  UnaryCall call(context, metrics_, "CudaSharedMemoryUnregister", tokens_);
  if (!call.access().ok()) return call.Finish(call.access());
  absl::StatusOr<SharedMemoryRegistry*> registry = CudaSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Finish(registry.status());
  return call.Finish((*registry)->Unregister(request->name(), SharedMemoryKind::kCuda));
}

}  // namespace replicad
