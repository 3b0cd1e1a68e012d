#include "server/grpc/token_auth_processor.h"

#include <optional>
#include <string>

#include "server/auth/access_policy.h"
#include "server/grpc/grpc_status.h"

namespace replicad {

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* /*context*/,
                                         OutputMetadata* /*consumed_auth_metadata*/,
                                         OutputMetadata* /*response_metadata*/) {
  auto path = auth_metadata.find(":path");
  std::string method;
  const std::optional<Role> role = RequiredRoleOfPath(
      path == auth_metadata.end() ? absl::string_view()
                                  : absl::string_view(path->second.data(), path->second.size()),
      &method);
  auto header = auth_metadata.find("authorization");
  if (header == auth_metadata.end()) return ToGrpcStatus(tokens_.CheckRole(nullptr, method, role));
  // Not consumed: the handlers read it again (UnaryCall), so that plain-text
  // listeners, which never run this, are held to the same rule.
  const std::string authorization(header->second.data(), header->second.size());
  return ToGrpcStatus(tokens_.CheckRole(&authorization, method, role));
}

}  // namespace replicad
