#ifndef REPLICAD_SERVER_GRPC_TOKEN_AUTH_PROCESSOR_H_
#define REPLICAD_SERVER_GRPC_TOKEN_AUTH_PROCESSOR_H_

#include "grpcpp/security/auth_metadata_processor.h"
#include "server/auth/access_tokens.h"

namespace replicad {

// Checks a gRPC call's bearer token (metadata "authorization") against the
// role its path needs (RequiredRoleOfPath) from the call's metadata alone,
// in gRPC's transport security layer, before the call reaches a service and
// before its message is read: a stranger sending a gigabyte is answered
// UNAUTHENTICATED (PERMISSION_DENIED for a token without the role) at
// once, and the stream is reset instead of being read into memory. It also
// closes what no handler of ours sees (grpc.reflection). gRPC runs it only
// on secure listeners (TLS); on plain-text ones the services' own checks
// (UnaryCall) remain, after the message. The handlers check again either
// way. `tokens` must outlive it. Thread-safe; never blocks (a digest
// compare, and at most one stat of the token file a second).
class TokenAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuthProcessor(const AccessTokens& tokens) : tokens_(tokens) {}

  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const AccessTokens& tokens_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_TOKEN_AUTH_PROCESSOR_H_
