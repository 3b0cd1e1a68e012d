#ifndef REPLICAD_SERVER_REPLICAD_SERVICE_H_
#define REPLICAD_SERVER_REPLICAD_SERVICE_H_

#include <vector>

#include "replicad/v1/replicad.grpc.pb.h"
#include "server/served_models.h"
#include "server/server_metrics.h"

namespace replicad {

// replicad.v1.Replicad over gRPC's callback API. Handlers only translate:
// they decode and validate the request, hand the batch to the model's
// ReplicaSet and answer from its completion, so no gRPC thread waits on a
// device. Every RPC is counted and timed in ServerMetrics. Thread-safe;
// `models`, `devices` and `metrics` must outlive the service.
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

 private:
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const std::string& model,
                                   const std::string& method, const absl::Status& status,
                                   double seconds);

  const ServedModels& models_;
  const std::vector<DeviceInfo> devices_;
  ServerMetrics& metrics_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_REPLICAD_SERVICE_H_
