#ifndef REPLICAD_SERVER_GRPC_GRPC_CREDENTIALS_H_
#define REPLICAD_SERVER_GRPC_GRPC_CREDENTIALS_H_

#include <memory>

#include "grpcpp/security/server_credentials.h"
#include "server/tls_files.h"

namespace replicad {

// The gRPC listener's credentials for --tls-*: TLS whose files gRPC's own
// watcher reads again when they change (every second), requiring and
// verifying client certificates when `tls` names a client CA; plain text
// when `tls` is not enabled. The files were checked by CheckTlsFiles.
std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(const TlsFiles& tls);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_GRPC_CREDENTIALS_H_
