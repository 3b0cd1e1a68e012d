#include "client/replicad_client.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace replicad::client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  if (code <= static_cast<int>(absl::StatusCode::kOk) ||
      code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(absl::StrCat("gRPC status ", code, ": ", status.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

namespace {

using google::protobuf::io::CodedOutputStream;

// A length-delimited field's tag and length.
void AppendFieldHeader(uint32_t field, uint64_t length, std::string* out) {
  uint8_t bytes[20];
  uint8_t* end = CodedOutputStream::WriteVarint32ToArray(field << 3 | 2, bytes);
  end = CodedOutputStream::WriteVarint64ToArray(length, end);
  out->append(reinterpret_cast<const char*>(bytes), end - bytes);
}

size_t FieldSize(uint32_t field, size_t length) {
  return CodedOutputStream::VarintSize32(field << 3 | 2) + CodedOutputStream::VarintSize64(length) +
         length;
}

void CountRelease(void* released) {
  static_cast<absl::BlockingCounter*>(released)->DecrementCount();
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ReplicadClient::Credentials(
    const ClientOptions& options) {
  if (options.tls_ca_file.empty() && options.tls_cert_file.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS client certificate needs its key, and a key its certificate");
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(options.tls_ca_file, "TLS CA");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "TLS certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "TLS key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::unique_ptr<ReplicadClient>> ReplicadClient::Connect(
    const std::string& target, const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("empty server address");
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("max_message_bytes ", options.max_message_bytes,
                                                   ": expected 1 to ",
                                                   std::numeric_limits<int>::max()));
  }
  if (options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deadline ", absl::FormatDuration(options.deadline), ": expected a positive duration"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(target, *credentials, args);
  return std::unique_ptr<ReplicadClient>(
      new ReplicadClient(std::move(channel), options.deadline, options.token));
}

ReplicadClient::ReplicadClient(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline,
                               std::string token)
    : stub_(v1::Replicad::NewStub(channel)),
      generic_stub_(channel),
      deadline_(deadline),
      token_(std::move(token)) {}

void ReplicadClient::Prepare(grpc::ClientContext* context) const {
  if (deadline_ != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  }
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
}

absl::StatusOr<v1::PredictResponse> ReplicadClient::Predict(const v1::PredictRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::PredictResponse response;
  absl::Status status = FromGrpcStatus(stub_->Predict(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::PredictResponse> ReplicadClient::PredictBorrowingInputs(
    const v1::PredictRequest& request) {
  int borrowed = 0;
  for (const v1::Tensor& input : request.inputs()) borrowed += !input.raw().empty();
  absl::BlockingCounter released(borrowed);
  grpc::Status status;
  grpc::ByteBuffer reply;
  {
    // The message protobuf would write, in its field order: model (1),
    // inputs (2, each one's raw (4) last) and output_names (3); the raws
    // as slices of their own that count down `released` when gRPC drops them.
    std::vector<grpc::Slice> slices;
    std::string text;
    v1::PredictRequest part;
    part.set_model(request.model());
    part.AppendToString(&text);
    for (const v1::Tensor& input : request.inputs()) {
      v1::Tensor head;
      head.set_name(input.name());
      head.set_dtype(input.dtype());
      *head.mutable_shape() = input.shape();
      const std::string head_bytes = head.SerializeAsString();
      const size_t raw = input.raw().size();
      constexpr uint32_t kInputs = 2, kRaw = 4;
      AppendFieldHeader(kInputs, head_bytes.size() + (raw > 0 ? FieldSize(kRaw, raw) : 0), &text);
      text += head_bytes;
      if (raw == 0) continue;
      AppendFieldHeader(kRaw, raw, &text);
      slices.emplace_back(text);
      text.clear();
      slices.emplace_back(const_cast<char*>(input.raw().data()), raw, &CountRelease, &released);
    }
    part.Clear();
    *part.mutable_output_names() = request.output_names();
    part.AppendToString(&text);
    if (!text.empty()) slices.emplace_back(text);
    grpc::ByteBuffer message(slices.data(), slices.size());
    slices.clear();

    grpc::ClientContext context;
    Prepare(&context);
    absl::Notification done;
    generic_stub_.UnaryCall(&context, "/replicad.v1.Replicad/Predict", grpc::StubOptions(),
                            &message, &reply, [&](grpc::Status s) {
                              status = std::move(s);
                              done.Notify();
                            });
    done.WaitForNotification();
  }
  // A call that failed early may leave a slice in the transport a while.
  released.Wait();
  if (!status.ok()) return FromGrpcStatus(status);
  v1::PredictResponse response;
  grpc::ProtoBufferReader reader(&reply);
  if (!response.ParseFromZeroCopyStream(&reader)) {
    return absl::InternalError("the server's PredictResponse does not parse");
  }
  return response;
}

absl::StatusOr<v1::ListDevicesResponse> ReplicadClient::ListDevices() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListDevicesResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListDevices(&context, v1::ListDevicesRequest(), &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ListModelsResponse> ReplicadClient::ListModels() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListModelsResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListModels(&context, v1::ListModelsRequest(), &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ModelInfo> ReplicadClient::GetModel(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetModelRequest request;
  request.set_name(name);
  v1::GetModelResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetModel(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_model());
}

absl::StatusOr<v1::ConfigureTrainingResponse> ReplicadClient::ConfigureTraining(
    const v1::ConfigureTrainingRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ConfigureTrainingResponse response;
  absl::Status status = FromGrpcStatus(stub_->ConfigureTraining(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::TrainStepResponse> ReplicadClient::TrainStep(
    const v1::TrainStepRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::TrainStepResponse response;
  absl::Status status = FromGrpcStatus(stub_->TrainStep(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

ReplicadClient::StepStream::StepStream(const ReplicadClient& client, int64_t steps) {
  if (steps > 0 && client.deadline_ != absl::InfiniteDuration()) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + client.deadline_ * steps));
  }
  if (!client.token_.empty()) context_.AddMetadata("authorization", "Bearer " + client.token_);
  call_ = client.stub_->TrainSteps(&context_);
}

ReplicadClient::StepStream::~StepStream() {
  if (finished_.has_value()) return;
  context_.TryCancel();
  (void)call_->Finish();
}

bool ReplicadClient::StepStream::Write(const v1::TrainStepRequest& request) {
  return !closed_ && call_->Write(request);
}

void ReplicadClient::StepStream::Close() {
  if (closed_) return;
  closed_ = true;
  (void)call_->WritesDone();
}

bool ReplicadClient::StepStream::Read(v1::TrainStepResponse* response) {
  return !finished_.has_value() && call_->Read(response);
}

absl::Status ReplicadClient::StepStream::Finish() {
  Close();  // The server ends the call only once the client said it has no more.
  if (!finished_.has_value()) finished_ = FromGrpcStatus(call_->Finish());
  return *finished_;
}

std::unique_ptr<ReplicadClient::StepStream> ReplicadClient::TrainSteps(int64_t steps) const {
  return std::make_unique<StepStream>(*this, steps);
}

absl::StatusOr<v1::SaveCheckpointResponse> ReplicadClient::SaveCheckpoint(
    const v1::SaveCheckpointRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SaveCheckpointResponse response;
  absl::Status status = FromGrpcStatus(stub_->SaveCheckpoint(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

}  // namespace replicad::client
