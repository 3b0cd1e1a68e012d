// Feeds raw bytes, as one client connection, to the HTTP/1.1 server every
// HTTP endpoint runs on (server/http/http_server.cc: Boost.Beast's parser,
// limits, keep-alive, 100-continue, refusals), here in front of the metrics
// endpoint (/metrics, /healthz) on a loopback port. The client sends the
// input, closes its sending side and reads until the server closes.
// Asserts: the server closes within 10 s; whatever it answers starts with an
// HTTP/1.x status line whose code is one the endpoint or the server gives
// (100, 200, 400, 404, 405, 413, 431, 501, 503); it keeps accepting
// connections (each input is a new one).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/metrics/counter.h"
#include "core/metrics/registry.h"
#include "fuzz/fuzz_check.h"
#include "server/metrics_http_server.h"

namespace replicad::fuzz {
namespace {

struct Endpoint {
  Endpoint() {
    // Something to render, labels included.
    registry.AddCounter("fuzz_requests_total", "Requests the fuzzer sent.", {"kind"})
        .WithLabels({"http"})
        .Increment();
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
        MetricsHttpServer::Start("127.0.0.1:0", registry, [] { return true; });
    if (!started.ok()) Violated(started.status().ToString());
    server = *std::move(started);
  }
  metrics::Registry registry;
  std::unique_ptr<MetricsHttpServer> server;
};

Endpoint& TheEndpoint() {
  static Endpoint* endpoint = new Endpoint();
  return *endpoint;
}

// libFuzzer's timer (SIGALRM, for -timeout) interrupts blocking calls; an
// interrupted connect goes on in the background, so it is waited for.
bool Connect(int fd, const sockaddr_in& address) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return true;
  if (errno != EINTR) return false;
  pollfd ready{fd, POLLOUT, 0};
  int n;
  do {
    n = poll(&ready, 1, 10000);
  } while (n < 0 && errno == EINTR);
  int error = n > 0 ? 0 : ETIMEDOUT;
  socklen_t length = sizeof(error);
  if (n > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
  errno = error;
  return error == 0;
}

// One connection: sends `input`, half-closes, returns all the server sent.
std::string Exchange(int port, const uint8_t* data, size_t size) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Violated(absl::StrCat("socket: ", std::strerror(errno)));
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!Connect(fd, address)) {
    Violated(absl::StrCat("the server stopped accepting: connect: ", std::strerror(errno)));
  }
  // The server may refuse and close before reading everything: a failed
  // send is the server's right, not a finding.
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buffer[16 * 1024];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      answer.append(buffer, static_cast<size_t>(n));
      continue;
    }
    const bool waited = n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK);
    if (waited && std::chrono::steady_clock::now() < deadline) continue;
    if (waited) Violated("the server neither answered nor closed within 10 s");
    break;  // Closed (or reset after a refusal).
  }
  // No TIME_WAIT on our side: a million connections would run out of ports.
  linger abort{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
  close(fd);
  return answer;
}

void CheckAnswer(const std::string& answer) {
  if (answer.empty()) return;  // Nothing complete was sent, or the client "went away".
  if (answer.rfind("HTTP/1.1 ", 0) != 0 && answer.rfind("HTTP/1.0 ", 0) != 0) {
    Violated(absl::StrCat("an answer that is not HTTP/1.x: ", answer.substr(0, 64)));
  }
  int code = 0;
  if (answer.size() < 12 || !absl::SimpleAtoi(answer.substr(9, 3), &code)) {
    Violated(absl::StrCat("no status code in: ", answer.substr(0, 64)));
  }
  static const std::set<int> kCodes = {100, 200, 400, 404, 405, 413, 431, 501, 503};
  if (!kCodes.count(code)) Violated(absl::StrCat("unexpected status ", code));
}

}  // namespace
}  // namespace replicad::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad::fuzz;
  CheckAnswer(Exchange(TheEndpoint().server->port(), data, size));
  return 0;
}
