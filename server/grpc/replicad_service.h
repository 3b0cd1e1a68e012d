#ifndef REPLICAD_SERVER_GRPC_REPLICAD_SERVICE_H_
#define REPLICAD_SERVER_GRPC_REPLICAD_SERVICE_H_

#include <string>
#include <vector>

#include "core/serve/serving_core.h"
#include "replicad/v1/replicad.grpc.pb.h"
#include "server/auth/access_tokens.h"
#include "server/server_metrics.h"

namespace replicad {

// replicad.v1.Replicad over gRPC's callback API: each handler decodes its
// request into the serving core's terms, calls the core, and encodes the
// answer from its completion, so no gRPC thread waits on a device. Every
// RPC is counted and timed in ServerMetrics. Thread-safe; `core`, `devices`
// and `metrics` must outlive the service.
class ReplicadService final : public replicad::v1::Replicad::CallbackService {
 public:
  ReplicadService(ServingCore& core, std::vector<DeviceInfo> devices, ServerMetrics& metrics,
                  const AccessTokens* tokens = nullptr);

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

 private:
  ServingCore& core_;
  const std::vector<DeviceInfo> devices_;
  ServerMetrics& metrics_;
  const AccessTokens* const tokens_;  // Null: no auth.
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_REPLICAD_SERVICE_H_
