#include "tests/testing/daemon_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace replicad::testing {
namespace {

// Spawns argv with stdout and stderr on a pipe; returns the read end.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int* out_fd) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (error != 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", strerror(error)));
  }
  *out_fd = fds[0];
  return pid;
}

// Reads what is available within `timeout_ms`; false at end of file.
bool ReadSome(int fd, std::string* out, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return true;
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n <= 0) return false;
  out->append(buffer, static_cast<size_t>(n));
  return true;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string BinDir() {
  const char* dir = std::getenv("REPLICAD_BIN_DIR");
  if (dir != nullptr) return dir;
  // Run by hand: the tests live in BUILD/tests, the binaries in BUILD/bin.
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? "build/bin" : (self.parent_path().parent_path() / "bin").string();
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {BinDir() + "/replicad", "serve",         "--metrics-listen",
                                   "127.0.0.1:0",          "--http-listen", "127.0.0.1:0"};
  if (std::find(extra_args.begin(), extra_args.end(), "--listen") == extra_args.end()) {
    argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto daemon = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  absl::StatusOr<pid_t> pid = Spawn(argv, &daemon->out_fd_);
  if (!pid.ok()) return pid.status();
  daemon->pid_ = *pid;
  // Up to the " (" after the address: a read may end inside it.
  const std::regex grpc("gRPC listening on (?:port (\\d+)|(unix:\\S+)) \\(");
  const std::regex metrics("metrics on port (\\d+)");
  // The doors open first; "ready: ..." once the startup models loaded.
  const std::regex ready("replicad: ready: ");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!ReadSome(daemon->out_fd_, &daemon->output_, 100)) break;
    std::smatch g, m;
    if (std::regex_search(daemon->output_, g, grpc) &&
        std::regex_search(daemon->output_, m, metrics) &&
        std::regex_search(daemon->output_, ready)) {
      if (g[1].matched) {
        daemon->grpc_port_ = std::stoi(g[1]);
        daemon->target_ = absl::StrCat("127.0.0.1:", daemon->grpc_port_);
      } else {
        daemon->target_ = g[2];
      }
      daemon->metrics_port_ = std::stoi(m[1]);
      return daemon;
    }
  }
  return absl::InternalError(absl::StrCat("replicad did not start:\n", daemon->output_));
}

int DaemonProcess::StopWith(int signal) {
  if (pid_ < 0) return -1;
  kill(pid_, signal);
  while (ReadSome(out_fd_, &output_, 100)) {
  }
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  close(out_fd_);
  return ExitCode(status);
}

DaemonProcess::~DaemonProcess() {
  if (pid_ >= 0) StopWith(SIGKILL);
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  CommandResult result;
  int fd = -1;
  absl::StatusOr<pid_t> pid = Spawn(argv, &fd);
  if (!pid.ok()) {
    result.out = std::string(pid.status().message());
    return result;
  }
  while (ReadSome(fd, &result.out, 1000)) {
  }
  close(fd);
  int status = 0;
  waitpid(*pid, &status, 0);
  result.exit_code = ExitCode(status);
  return result;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to port ", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("short write");
  }
  std::string response;
  while (ReadSome(fd, &response, 5000)) {
  }
  close(fd);
  return response;
}

}  // namespace replicad::testing
