#include "server/grpc/unix_socket_address.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

// A socket bound at `path`, listening or not; closed (its file left) by the destructor.
class BoundSocket {
 public:
  BoundSocket(const std::string& path, bool listening) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    ok_ = fd_ >= 0 &&
          bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 &&
          (!listening || listen(fd_, 1) == 0);
  }
  ~BoundSocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// Short: a socket path must fit sockaddr_un's 108 bytes.
std::string SocketPath(const std::string& name) {
  return "/tmp/replicad_usa_" + std::to_string(getpid()) + "_" + name;
}

TEST(UnixSocketAddressTest, RecognizesGrpcsUnixForms) {
  EXPECT_TRUE(IsUnixSocketAddress("unix:/run/replicad/grpc.sock"));
  EXPECT_TRUE(IsUnixSocketAddress("unix:relative.sock"));
  EXPECT_TRUE(IsUnixSocketAddress("unix-abstract:replicad"));
  EXPECT_FALSE(IsUnixSocketAddress("127.0.0.1:8500"));
  EXPECT_FALSE(IsUnixSocketAddress("unix.example.com:8500"));
  EXPECT_FALSE(IsUnixSocketAddress(""));
}

TEST(UnixSocketAddressTest, AbsentFilesAndOtherAddressesAreUnused) {
  const std::string path = SocketPath("absent");
  std::filesystem::remove(path);
  EXPECT_TRUE(CheckUnixSocketUnused("unix:" + path).ok());
  EXPECT_TRUE(CheckUnixSocketUnused("127.0.0.1:0").ok());
  EXPECT_TRUE(CheckUnixSocketUnused("unix-abstract:replicad").ok());
}

TEST(UnixSocketAddressTest, ARegularFileIsLeftToGrpcsBind) {
  const std::string path = SocketPath("file");
  std::ofstream(path) << "not a socket";
  EXPECT_TRUE(CheckUnixSocketUnused("unix:" + path).ok());
  std::filesystem::remove(path);
}

TEST(UnixSocketAddressTest, AStaleSocketIsUnused) {
  const std::string path = SocketPath("stale");
  std::filesystem::remove(path);
  {
    BoundSocket stale(path, /*listening=*/false);
    ASSERT_TRUE(stale.ok());
    EXPECT_TRUE(CheckUnixSocketUnused("unix:" + path).ok());
  }
  EXPECT_TRUE(std::filesystem::exists(path));  // Left behind, as by a crash.
  EXPECT_TRUE(CheckUnixSocketUnused("unix:" + path).ok());
  std::filesystem::remove(path);
}

TEST(UnixSocketAddressTest, ALiveServersSocketIsAlreadyInUse) {
  const std::string path = SocketPath("live");
  std::filesystem::remove(path);
  BoundSocket live(path, /*listening=*/true);
  ASSERT_TRUE(live.ok());
  absl::Status status = CheckUnixSocketUnused("unix:" + path);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("--listen unix:" + path));
  EXPECT_THAT(status.message(), HasSubstr("a server already accepts connections on " + path));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace replicad
