#include "client/replicad_client.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

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
      new ReplicadClient(v1::Replicad::NewStub(channel), options.deadline, options.token));
}

ReplicadClient::ReplicadClient(std::unique_ptr<v1::Replicad::Stub> stub, absl::Duration deadline,
                               std::string token)
    : stub_(std::move(stub)), deadline_(deadline), token_(std::move(token)) {}

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
