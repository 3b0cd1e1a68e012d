#ifndef REPLICAD_SERVER_GRPC_CALL_CONTEXT_H_
#define REPLICAD_SERVER_GRPC_CALL_CONTEXT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/serve/request_context.h"
#include "grpcpp/server_context.h"
#include "server/auth/access_policy.h"
#include "server/auth/access_tokens.h"

namespace replicad {

// The core's view of a gRPC call: the client's deadline, and cancellation
// read from the call (valid until the call is finished). `id` and
// `priority` come from the protocol's own fields, where it has them.
RequestContext ContextOf(grpc::CallbackServerContext* call, std::string id = "",
                         uint64_t priority = 0);

// Whether the caller may make `rpc`: AccessTokens::Check on the call's
// "authorization" metadata; OK when `tokens` is null (no auth).
absl::Status CheckAccess(grpc::CallbackServerContext* call, const AccessTokens* tokens,
                         absl::string_view rpc);
// The same for a role the call turned out to need beyond the RPC's own
// (DownloadModel of trained weights needs train).
absl::Status CheckAccessAs(grpc::CallbackServerContext* call, const AccessTokens* tokens,
                           absl::string_view rpc, Role role);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_CALL_CONTEXT_H_
