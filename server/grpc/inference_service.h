#ifndef REPLICAD_SERVER_GRPC_INFERENCE_SERVICE_H_
#define REPLICAD_SERVER_GRPC_INFERENCE_SERVICE_H_

#include <memory>

#include "core/serve/serving_core.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/auth/access_tokens.h"
#include "server/host_buffer_pool.h"
#include "server/model_upload.h"
#include "server/server_metrics.h"
#include "server/shared_memory_registry.h"

namespace replicad {

namespace inference_service_base {
using G = inference::GRPCInferenceService;
// Every method with the callback API, ModelInfer's raw: its request and
// response as gRPC's byte buffers (see InferenceService::ModelInfer).
using Base = G::WithCallbackMethod_ServerLive<
    G::WithCallbackMethod_ServerReady<G::WithCallbackMethod_ModelReady<
        G::WithCallbackMethod_ServerMetadata<G::WithCallbackMethod_ModelMetadata<
            G::WithRawCallbackMethod_ModelInfer<G::WithCallbackMethod_ModelStreamInfer<
                G::WithCallbackMethod_ModelConfig<G::WithCallbackMethod_ModelStatistics<
                    G::WithCallbackMethod_RepositoryIndex<G::WithCallbackMethod_RepositoryModelLoad<
                        G::WithCallbackMethod_RepositoryModelUnload<
                            G::WithCallbackMethod_SystemSharedMemoryStatus<
                                G::WithCallbackMethod_SystemSharedMemoryRegister<
                                    G::WithCallbackMethod_SystemSharedMemoryUnregister<
                                        G::WithCallbackMethod_CudaSharedMemoryStatus<
                                            G::WithCallbackMethod_CudaSharedMemoryRegister<
                                                G::WithCallbackMethod_CudaSharedMemoryUnregister<
                                                    G::WithCallbackMethod_TraceSetting<
                                                        G::WithCallbackMethod_LogSettings<
                                                            G::Service>>>>>>>>>>>>>>>>>>>>;
}  // namespace inference_service_base

// inference.GRPCInferenceService, the Open Inference Protocol (KServe v2 as
// Triton extends it) over gRPC, on the same port as replicad.v1: each
// handler decodes into the serving core's terms, calls it, and encodes.
// Health, metadata, config, statistics, inference (unary and streaming), the
// model repository, system and CUDA shared memory are served; RPCs not
// overridden here (trace and log settings) answer UNIMPLEMENTED, as gRPC does
// for them. Thread-safe; `core`, `metrics` and `shared_memory` must outlive
// the service; a null `shared_memory` disables both shared-memory extensions
// (CUDA's needs a registry that opens GPU memory).
// `buffers` holds ModelInfer's tensor bytes (null: a pool of the service's
// own, HostBufferPool::kDefaultIdleBytes).
class InferenceService final : public inference_service_base::Base {
 public:
  InferenceService(ServingCore& core, ServerMetrics& metrics, SharedMemoryRegistry* shared_memory,
                   const AccessTokens* tokens = nullptr,
                   std::shared_ptr<HostBufferPool> buffers = nullptr,
                   ModelUploads* uploads = nullptr);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  // The same message as protobuf's, read from its wire bytes (wire_request.h):
  // raw_input_contents and packed fp32/int64 contents are copied once, into
  // pooled buffers; each output not placed in shared memory is computed into
  // a pooled buffer that the response borrows (wire_response.h). A request
  // protobuf would refuse is INVALID_ARGUMENT.
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // Each request read from the stream runs as a ModelInfer would, concurrently
  // with the others; each answer (or its error, as error_message, the stream
  // going on) is written as it completes. The stream ends once the client
  // has closed its side and every answer is written. Its messages are
  // protobuf's, parsed and serialized whole (tensor bytes copied).
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;

 private:
  ServingCore& core_;
  ServerMetrics& metrics_;
  const AccessTokens* const tokens_;  // Null: no auth.
  SharedMemoryRegistry* const shared_memory_;
  ModelUploads* const uploads_;  // Null: no --model-upload-root.
  const std::shared_ptr<HostBufferPool> buffers_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_INFERENCE_SERVICE_H_
