#ifndef REPLICAD_SERVER_GRPC_GRPC_STATUS_H_
#define REPLICAD_SERVER_GRPC_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace replicad {

// The one place a gRPC status is made: the code maps one to one (absl's codes
// are gRPC's), the message is kept.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_GRPC_STATUS_H_
