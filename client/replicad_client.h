#ifndef REPLICAD_CLIENT_REPLICAD_CLIENT_H_
#define REPLICAD_CLIENT_REPLICAD_CLIENT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "replicad/v1/replicad.grpc.pb.h"
#include "replicad/v1/replicad.pb.h"

namespace replicad::client {

struct ClientOptions {
  // Largest request or response, both directions. gRPC's default of 4 MiB is too
  // small for a batch of images; the server's limit applies as well.
  int64_t max_message_bytes = int64_t{256} << 20;
  // Per call, from the moment it starts; absl::InfiniteDuration() for none.
  // Expiry ends the call with DEADLINE_EXCEEDED and cancels it on the server.
  absl::Duration deadline = absl::Seconds(30);
  // TLS: the PEM file of the CA that signed the server's certificate (empty
  // with no client certificate: plain text), and for mutual TLS this
  // client's certificate chain and key.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Sent as "authorization: Bearer <token>" on every call (servers run with
  // --auth-tokens); empty: none.
  std::string token;
};

// A client of one replicad server (the replicad.v1.Replicad service), over a
// plain-text or TLS channel. Every call returns the server's status unchanged (see
// FromGrpcStatus); an unreachable server is UNAVAILABLE.
//
// Thread-safe: calls may be made concurrently from any number of threads and
// share one channel.
class ReplicadClient {
 public:
  // `target` is a gRPC target, e.g. "localhost:8500" or "unix:///run/replicad.sock".
  // Does not contact the server: the channel connects on the first call.
  // InvalidArgument when target is empty, max_message_bytes is not in
  // [1, 2^31 - 1] or the deadline is not positive; NotFound naming a TLS file
  // that cannot be read, or InvalidArgument for a certificate without its key.
  static absl::StatusOr<std::unique_ptr<ReplicadClient>> Connect(const std::string& target,
                                                                 const ClientOptions& options);

  ReplicadClient(const ReplicadClient&) = delete;
  ReplicadClient& operator=(const ReplicadClient&) = delete;

  absl::StatusOr<v1::PredictResponse> Predict(const v1::PredictRequest& request);
  // Predict without copying the input tensors into a serialized message: the
  // request goes out as slices, the inputs' raw bytes borrowed from
  // `request` (gRPC's generic stub; the bytes on the wire are the same). It
  // returns only once gRPC has let go of them. For large tensors: this saves
  // a copy of each (and its fresh pages) per call.
  absl::StatusOr<v1::PredictResponse> PredictBorrowingInputs(const v1::PredictRequest& request);
  absl::StatusOr<v1::ListDevicesResponse> ListDevices();
  absl::StatusOr<v1::ListModelsResponse> ListModels();
  // NOT_FOUND (from the server) when no model is called `name`.
  absl::StatusOr<v1::ModelInfo> GetModel(const std::string& name);

  // Training. The server checks the request (model, tensors, configuration) and
  // answers with its own status: e.g. NOT_FOUND for an unknown model,
  // INVALID_ARGUMENT for a bad batch, UNIMPLEMENTED from a server without training.
  absl::StatusOr<v1::ConfigureTrainingResponse> ConfigureTraining(
      const v1::ConfigureTrainingRequest& request);
  absl::StatusOr<v1::TrainStepResponse> TrainStep(const v1::TrainStepRequest& request);
  absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(
      const v1::SaveCheckpointRequest& request);

  // TrainSteps: steps written in order and answered in order, the server
  // uploading the next one to its GPUs while one runs. With `steps` > 0 the
  // stream's deadline is the client's per-call deadline times `steps` (each
  // step may take one call's time), so a server that stops answering ends
  // it with DEADLINE_EXCEEDED; with 0, none (an epoch's stream may take
  // hours). The token applies. Write the next step before reading the
  // answer to the one before, so the server always holds it; more than one
  // ahead only waits in gRPC's buffers. Not thread-safe: one writer and
  // reader.
  class StepStream {
   public:
    StepStream(const ReplicadClient& client, int64_t steps);
    ~StepStream();  // Cancels a stream not yet finished.
    // False once the call has ended (a step failed: Finish says why).
    bool Write(const v1::TrainStepRequest& request);
    // No more steps (half-close); their answers still come through Read.
    void Close();
    // The next step's answer; false once none is left (and after).
    bool Read(v1::TrainStepResponse* response);
    // After Read said false: the call's status, OK once every step written
    // was answered; the first failed step's error otherwise. Closes first.
    absl::Status Finish();

   private:
    grpc::ClientContext context_;
    std::unique_ptr<grpc::ClientReaderWriter<v1::TrainStepRequest, v1::TrainStepResponse>> call_;
    bool closed_ = false;
    std::optional<absl::Status> finished_;
  };
  std::unique_ptr<StepStream> TrainSteps(int64_t steps = 0) const;

 private:
  ReplicadClient(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline,
                 std::string token);
  static absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
      const ClientOptions& options);

  // Applies the deadline and the token to a fresh context for one call.
  void Prepare(grpc::ClientContext* context) const;

  const std::unique_ptr<v1::Replicad::Stub> stub_;
  grpc::GenericStub generic_stub_;
  const absl::Duration deadline_;
  const std::string token_;
};

// The one place a grpc::Status becomes an absl::Status: same code (the two
// enums share the canonical numbering), same message. A code outside the
// canonical range becomes UNKNOWN with the number in the message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace replicad::client

#endif  // REPLICAD_CLIENT_REPLICAD_CLIENT_H_
