#ifndef REPLICAD_SERVER_GRPC_MODEL_DOWNLOAD_H_
#define REPLICAD_SERVER_GRPC_MODEL_DOWNLOAD_H_

#include "core/serve/serving_core.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "replicad/v1/replicad.pb.h"
#include "server/auth/access_tokens.h"
#include "server/server_metrics.h"

namespace replicad {

// replicad.v1 DownloadModel: the model's ONNX file with its current weights
// (ServingCore::ExportModel) streamed in pieces of kModelChunkBytes, so that
// a model larger than a gRPC message comes through; the first piece carries
// the step and the file's size. The caller needs the infer role, and train
// as well when the weights come from training steps (what a trained model
// learnt is training's to hand out). Counted in ServerMetrics like the unary
// RPCs. The reactor deletes itself when the call is done.
inline constexpr size_t kModelChunkBytes = size_t{1} << 20;

grpc::ServerWriteReactor<v1::ModelChunk>* StartModelDownload(
    grpc::CallbackServerContext* context, ServingCore& core, ServerMetrics& metrics,
    const AccessTokens* tokens, const v1::DownloadModelRequest& request);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_MODEL_DOWNLOAD_H_
