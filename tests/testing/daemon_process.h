#ifndef REPLICAD_TESTS_TESTING_DAEMON_PROCESS_H_
#define REPLICAD_TESTS_TESTING_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace replicad::testing {

// The directory holding the built replicad and replicactl (REPLICAD_BIN_DIR,
// set by CTest).
std::string BinDir();

// A `replicad serve` child process on ephemeral ports. Start waits until it
// reports its gRPC address and metrics port (or fails with its output). A
// "--listen" among `extra_args` replaces the default gRPC address (e.g. a
// unix:PATH socket). The destructor kills it.
class DaemonProcess {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const std::vector<std::string>& extra_args);
  ~DaemonProcess();

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }  // 0 on a Unix socket.
  int metrics_port() const { return metrics_port_; }
  // What a gRPC client connects to: 127.0.0.1:PORT or unix:PATH.
  const std::string& target() const { return target_; }
  // Sends `signal` and waits; returns the exit code (or 128 + the signal
  // that killed it). Everything it printed is in output().
  int StopWith(int signal);
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int grpc_port_ = 0;
  std::string target_;
  int metrics_port_ = 0;
  std::string output_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr, interleaved.
};
// Runs argv[0] with the arguments and waits for it.
CommandResult RunCommand(const std::vector<std::string>& argv);

// GET http://127.0.0.1:port/path; returns the whole response (status line,
// headers, body) or an error.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_DAEMON_PROCESS_H_
