#ifndef REPLICAD_SERVER_GRPC_CALL_CONTEXT_H_
#define REPLICAD_SERVER_GRPC_CALL_CONTEXT_H_

#include <string>

#include "core/serve/request_context.h"
#include "grpcpp/server_context.h"

namespace replicad {

// The core's view of a gRPC call: the client's deadline, and cancellation
// read from the call (valid until the call is finished). `id` and
// `priority` come from the protocol's own fields, where it has them.
RequestContext ContextOf(grpc::CallbackServerContext* call, std::string id = "",
                         uint64_t priority = 0);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_CALL_CONTEXT_H_
