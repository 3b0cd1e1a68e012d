#include "server/grpc/unix_socket_address.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace replicad {
namespace {

constexpr absl::string_view kUnixPrefix = "unix:";

// True when something accepts a stream connection on the socket at `path`.
bool SomeoneListensAt(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return false;  // gRPC refuses it anyway.
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool connected =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return connected;
}

}  // namespace

bool IsUnixSocketAddress(absl::string_view address) {
  return absl::StartsWith(address, kUnixPrefix) || absl::StartsWith(address, "unix-abstract:");
}

absl::Status CheckUnixSocketUnused(absl::string_view address) {
  if (!absl::StartsWith(address, kUnixPrefix)) return absl::OkStatus();
  const std::string path(address.substr(kUnixPrefix.size()));
  struct stat info;
  if (stat(path.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) return absl::OkStatus();
  if (!SomeoneListensAt(path)) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat(
      "--listen ", address, ": a server already accepts connections on ", path,
      " (gRPC would remove its socket file and take its clients); stop it or choose another path"));
}

}  // namespace replicad
