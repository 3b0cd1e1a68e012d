#ifndef REPLICAD_SERVER_GRPC_UNARY_CALL_H_
#define REPLICAD_SERVER_GRPC_UNARY_CALL_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "core/base/clock.h"
#include "grpcpp/server_context.h"
#include "server/auth/access_tokens.h"
#include "server/grpc/call_context.h"
#include "server/grpc/grpc_status.h"
#include "server/server_metrics.h"

namespace replicad {

// One unary RPC of a front door: its reactor, whether the caller may make
// it, and the metrics every answer records (requests_total and
// request_duration_seconds by model, method and code). Cheap to copy into a
// completion callback.
class UnaryCall {
 public:
  // `method` is the RPC's name (access_policy.h); `tokens` null: no auth.
  UnaryCall(grpc::CallbackServerContext* context, ServerMetrics& metrics, std::string method,
            const AccessTokens* tokens)
      : reactor_(context->DefaultReactor()),
        metrics_(&metrics),
        method_(std::move(method)),
        start_(std::chrono::steady_clock::now()),
        access_(CheckAccess(context, tokens, method_)) {}

  // OK, or why the caller may not make this call (to Finish with at once).
  const absl::Status& access() const { return access_; }

  // Records and sends the answer; `model` labels the metrics ("" for none,
  // and for unknown names, so that clients cannot grow the series).
  grpc::ServerUnaryReactor* Finish(const absl::Status& status, const std::string& model = "") {
    metrics_->RecordRequest(model, method_, status, SecondsSince(start_));
    reactor_->Finish(ToGrpcStatus(status));
    return reactor_;
  }
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

 private:
  grpc::ServerUnaryReactor* reactor_;
  ServerMetrics* metrics_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
  absl::Status access_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_UNARY_CALL_H_
