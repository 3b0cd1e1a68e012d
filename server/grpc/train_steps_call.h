#ifndef REPLICAD_SERVER_GRPC_TRAIN_STEPS_CALL_H_
#define REPLICAD_SERVER_GRPC_TRAIN_STEPS_CALL_H_

#include "core/serve/serving_core.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "replicad/v1/replicad.pb.h"
#include "server/auth/access_tokens.h"
#include "server/server_metrics.h"

namespace replicad {

// replicad.v1 TrainSteps: the training steps a client streams, run in order
// by a TrainStepStream (core/serve/train_step_stream.h: the next step,
// already read, is uploaded to the GPUs while one runs), each answered as
// it is applied. The call reads a message only while the stream has room
// (one step running, one waiting), so gRPC's flow control holds the client
// back. It ends with the first failed step's error (the answers before it
// written first), or OK once the client half-closed and every step was
// answered. Messages are gRPC's bytes, decoded here: gRPC's own decoding
// would end a read that cannot be decoded as a half-close does, so that the
// call would end OK having dropped it and the steps after it; here such a
// message fails the call with INVALID_ARGUMENT naming it (the answers before
// it written first). The caller needs the train role, as for TrainStep; the
// call is counted once in ServerMetrics (CANCELLED where the client
// cancelled or the deadline passed), and each step as a TrainStep is. The reactor deletes itself
// when the call is done.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartTrainSteps(
    grpc::CallbackServerContext* context, ServingCore& core, ServerMetrics& metrics,
    const AccessTokens* tokens);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_TRAIN_STEPS_CALL_H_
