#ifndef REPLICAD_SERVER_GRPC_UNIX_SOCKET_ADDRESS_H_
#define REPLICAD_SERVER_GRPC_UNIX_SOCKET_ADDRESS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace replicad {

// gRPC's Unix domain socket addresses, "unix:PATH" and "unix-abstract:NAME":
// reachable from this host only (a path by whoever its file's permissions
// admit). The daemon's gRPC door may listen on one; HTTP and metrics may not.
bool IsUnixSocketAddress(absl::string_view address);

// Before listening on "unix:PATH": gRPC removes any socket file at PATH
// before it binds, so a second daemon given the same path would silently
// take the first one's clients. OK when PATH does not exist, is not a socket
// (gRPC's bind then fails on it) or is a socket nobody accepts on (a crashed
// daemon's, which gRPC replaces); AlreadyExists, naming PATH, when a server
// accepts connections there. Any other address: OK.
absl::Status CheckUnixSocketUnused(absl::string_view address);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_UNIX_SOCKET_ADDRESS_H_
