#ifndef REPLICAD_SERVER_GRPC_REPLICAD_SERVICE_H_
#define REPLICAD_SERVER_GRPC_REPLICAD_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "core/serve/serving_core.h"
#include "replicad/v1/replicad.grpc.pb.h"
#include "server/auth/access_tokens.h"
#include "server/host_buffer_pool.h"
#include "server/model_upload.h"
#include "server/server_metrics.h"

namespace replicad {

namespace replicad_service_base {
using R = v1::Replicad;
// Every method with the callback API, Predict's and TrainSteps' raw: their
// messages as gRPC's byte buffers (see ReplicadService::Predict and
// train_steps_call.h).
using Base = R::WithRawCallbackMethod_Predict<R::WithCallbackMethod_ListDevices<
    R::WithCallbackMethod_ListModels<R::WithCallbackMethod_GetModel<
        R::WithCallbackMethod_ConfigureTraining<R::WithCallbackMethod_TrainStep<
            R::WithRawCallbackMethod_TrainSteps<R::WithCallbackMethod_SaveCheckpoint<
                R::WithCallbackMethod_LoadModel<R::WithCallbackMethod_UnloadModel<
                    R::WithCallbackMethod_DownloadModel<R::Service>>>>>>>>>>>;
}  // namespace replicad_service_base

// replicad.v1.Replicad over gRPC's callback API: each handler decodes its
// request into the serving core's terms, calls the core, and encodes the
// answer from its completion, so no gRPC thread waits on a device. Every
// RPC is counted and timed in ServerMetrics. Thread-safe; `core`, `devices`
// and `metrics` must outlive the service. `buffers` holds Predict's tensor
// bytes (null: a pool of the service's own, HostBufferPool::kDefaultIdleBytes).
class ReplicadService final : public replicad_service_base::Base {
 public:
  ReplicadService(ServingCore& core, std::vector<DeviceInfo> devices, ServerMetrics& metrics,
                  const AccessTokens* tokens = nullptr,
                  std::shared_ptr<HostBufferPool> buffers = nullptr,
                  ModelUploads* uploads = nullptr);

  // The same message as protobuf's, read from its wire bytes (wire_request.h):
  // each input's raw is copied once, into a pooled buffer; each output is
  // computed into a pooled buffer that the response borrows (wire_response.h).
  // A request protobuf would refuse is INVALID_ARGUMENT.
  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
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
  // As Triton's RepositoryModelLoad/Unload (model_upload.h).
  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* context,
                                      const v1::LoadModelRequest* request,
                                      v1::LoadModelResponse* response) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* context,
                                        const v1::UnloadModelRequest* request,
                                        v1::UnloadModelResponse* response) override;
  // model_download.h.
  // The steps a client streams (train_steps_call.h).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* TrainSteps(
      grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::ModelChunk>* DownloadModel(
      grpc::CallbackServerContext* context, const v1::DownloadModelRequest* request) override;

 private:
  ServingCore& core_;
  const std::vector<DeviceInfo> devices_;
  ServerMetrics& metrics_;
  const AccessTokens* const tokens_;  // Null: no auth.
  const std::shared_ptr<HostBufferPool> buffers_;
  ModelUploads* const uploads_;  // Null: no --model-upload-root.
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_REPLICAD_SERVICE_H_
