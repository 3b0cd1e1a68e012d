#include "server/grpc/call_context.h"

#include <chrono>

namespace replicad {

RequestContext ContextOf(grpc::CallbackServerContext* call, std::string id, uint64_t priority) {
  RequestContext context;
  context.id = std::move(id);
  context.priority = priority;
  // gRPC reports "no deadline" as the clock's far end.
  const std::chrono::system_clock::time_point deadline = call->deadline();
  if (deadline < std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    context.deadline = absl::FromChrono(deadline);
  }
  context.cancelled = [call] { return call->IsCancelled(); };
  return context;
}

absl::Status CheckAccess(grpc::CallbackServerContext* call, const AccessTokens* tokens,
                         absl::string_view rpc) {
  if (tokens == nullptr) return absl::OkStatus();
  const auto& metadata = call->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return tokens->Check(nullptr, rpc);
  const std::string authorization(it->second.data(), it->second.size());
  return tokens->Check(&authorization, rpc);
}

}  // namespace replicad
