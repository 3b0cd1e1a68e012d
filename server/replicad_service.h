#ifndef REPLICAD_SERVER_REPLICAD_SERVICE_H_
#define REPLICAD_SERVER_REPLICAD_SERVICE_H_

#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "replicad/v1/replicad.grpc.pb.h"
#include "server/served_models.h"
#include "server/server_metrics.h"

namespace replicad {

// replicad.v1.Replicad over gRPC's callback API. Handlers only translate:
// they decode and validate the request, hand the batch to the model's
// ReplicaSet and answer from its completion, so no gRPC thread waits on a
// device. Every RPC is counted and timed in ServerMetrics. Thread-safe;
// `models`, `devices` and `metrics` must outlive the service.
//
// Shutdown is two-phase: StartDraining makes new Predicts fail fast with
// UNAVAILABLE (so a client retries elsewhere) while those in flight finish;
// AwaitIdle waits for them. Then the gRPC server can shut down at once.
class ReplicadService final : public replicad::v1::Replicad::CallbackService {
 public:
  ReplicadService(const ServedModels& models, std::vector<DeviceInfo> devices,
                  ServerMetrics& metrics);

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const v1::PredictRequest* request,
                                    v1::PredictResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* context,
                                        const v1::ListDevicesRequest* request,
                                        v1::ListDevicesResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::GetModelResponse* response) override;

  grpc::ServerUnaryReactor* ConfigureTraining(grpc::CallbackServerContext* context,
                                              const v1::ConfigureTrainingRequest* request,
                                              v1::ConfigureTrainingResponse* response) override;
  grpc::ServerUnaryReactor* TrainStep(grpc::CallbackServerContext* context,
                                      const v1::TrainStepRequest* request,
                                      v1::TrainStepResponse* response) override;
  grpc::ServerUnaryReactor* SaveCheckpoint(grpc::CallbackServerContext* context,
                                           const v1::SaveCheckpointRequest* request,
                                           v1::SaveCheckpointResponse* response) override;

  void StartDraining();
  // True once no Predict or TrainStep is in flight; false if `timeout` passed first.
  bool AwaitIdle(absl::Duration timeout);

 private:
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const std::string& model,
                                   const std::string& method, const absl::Status& status,
                                   double seconds);
  // NotFound naming `field` and the served models.
  absl::Status UnknownModel(const std::string& name, const std::string& field = "model") const;

  // Counts an admitted Predict until Release (or destruction).
  class InFlight {
   public:
    explicit InFlight(ReplicadService* service) : service_(service) {}
    InFlight(InFlight&& other) : service_(std::exchange(other.service_, nullptr)) {}
    InFlight& operator=(InFlight&&) = delete;
    ~InFlight() { Release(); }
    void Release();

   private:
    ReplicadService* service_;
  };
  // An InFlight for a new Predict; nullopt while draining.
  std::optional<InFlight> Admit();

  const ServedModels& models_;
  const std::vector<DeviceInfo> devices_;
  ServerMetrics& metrics_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_REPLICAD_SERVICE_H_
