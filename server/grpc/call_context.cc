#include "server/grpc/call_context.h"

#include <chrono>
#include <optional>

#include "server/auth/access_policy.h"

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

namespace {

// AccessTokens::CheckRole on the call's "authorization" metadata.
absl::Status CheckCallRole(grpc::CallbackServerContext* call, const AccessTokens& tokens,
                           absl::string_view rpc, std::optional<Role> role) {
  const auto& metadata = call->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return tokens.CheckRole(nullptr, rpc, role);
  const std::string authorization(it->second.data(), it->second.size());
  return tokens.CheckRole(&authorization, rpc, role);
}

}  // namespace

absl::Status CheckAccess(grpc::CallbackServerContext* call, const AccessTokens* tokens,
                         absl::string_view rpc) {
  if (tokens == nullptr) return absl::OkStatus();
  return CheckCallRole(call, *tokens, rpc, RequiredRole(rpc));
}

absl::Status CheckAccessAs(grpc::CallbackServerContext* call, const AccessTokens* tokens,
                           absl::string_view rpc, Role role) {
  if (tokens == nullptr) return absl::OkStatus();
  return CheckCallRole(call, *tokens, rpc, role);
}

}  // namespace replicad
