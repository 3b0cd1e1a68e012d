#include "server/grpc/grpc_status.h"

#include <string>

#include "server/error_message.h"

namespace replicad {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      BoundedMessage(status.message()));
}

}  // namespace replicad
