#ifndef REPLICAD_SERVER_HTTP_HTTP_SERVER_H_
#define REPLICAD_SERVER_HTTP_HTTP_SERVER_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "server/tls_files.h"

namespace replicad {

// One HTTP/1.1 request as a handler sees it.
struct HttpRequest {
  std::string method;  // As sent: "GET", "POST", "HEAD", ...
  std::string path;    // The target before any '?', not percent-decoded.
  std::string query;   // After the '?', or empty.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The value of header `name` (case-insensitive), or nullptr.
  const std::string* Header(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  // Beyond the usual ones.
  std::string body;
};

// Answers a request exactly once, from any thread. Destroying it unanswered
// closes the connection.
using HttpResponder = absl::AnyInvocable<void(HttpResponse) &&>;
using HttpHandler = std::function<void(HttpRequest request, HttpResponder respond)>;

// An HTTP/1.1 server for replicad's endpoints (/metrics, the Open Inference
// Protocol's REST door). It owns sockets, parsing, limits, keep-alive and
// time-outs; what a request means is the handler's business. Handlers run
// on the server's threads and may answer later from elsewhere (an inference
// answers from the serving core's threads), so a slow request never holds a
// connection's thread. A HEAD response goes out without its body.
//
// A request that does not parse is answered 400, one whose header exceeds
// the limit 431, one whose body exceeds it 413, one whose transfer coding is
// not chunked 501 (each rendered by `Options::render_error`) and its
// connection is closed; the server carries on. "Expect: 100-continue" is
// answered before the body is read. Connections are kept alive as HTTP/1.1
// asks, closed when idle, and at most max_connections are open at once.
//
// Thread-safe: Stop and port may be called from any thread but the server's.
class HttpServer {
 public:
  struct Options {
    std::string name = "HTTP endpoint";  // Names the endpoint in errors.
    size_t header_limit = 8 * 1024;
    size_t body_limit = 64 * 1024;
    std::chrono::seconds idle_timeout{30};
    int threads = 1;
    // Connections open at once; more are closed as they come.
    int max_connections = 1024;
    // The body of the server's own errors (400, 413, 431).
    std::function<HttpResponse(int status, const std::string& message)> render_error;
    // Set: HTTPS only (TLS 1.2 or later), with client certificates required
    // when tls.client_ca is set. The files are looked at again at most once
    // a second as connections arrive; new connections use the new ones, open
    // ones keep theirs. A handshake that fails closes its connection.
    TlsFiles tls;
    // Asked with each request's head (method, path, query and headers; no
    // body yet) before its body is read: a response refuses the request
    // with it and closes the connection, so that a client that may not
    // make the request cannot make the server buffer its body. Null: every
    // request is read whole.
    std::function<std::optional<HttpResponse>(const HttpRequest& head)> screen;
  };

  // Listens on `listen_address`, "host:port": "0.0.0.0:8000", "127.0.0.1:0"
  // (port 0 picks a free port; see port()), "[::1]:8000", "localhost:8000",
  // ":8000" (all IPv4 interfaces). InvalidArgument when the address does not
  // parse or the host does not resolve; Unavailable (or PermissionDenied)
  // when the socket cannot be bound or listened on; the message names the
  // endpoint, the address and the operating system's reason. InvalidArgument
  // as CheckTlsFiles says when options.tls does not load.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen_address,
                                                           Options options, HttpHandler handler);

  ~HttpServer();  // Stops the server (see Stop).
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The port actually bound, e.g. the one chosen for port 0.
  int port() const { return port_; }

  // Closes the listening socket and every connection, joins the server's
  // threads, then waits until every responder handed out has been called or
  // destroyed (answers given after Stop are dropped). Idempotent.
  void Stop();

 private:
  class Impl;
  HttpServer(std::unique_ptr<Impl> impl, int port, int threads);

  std::unique_ptr<Impl> impl_;  // Released by Stop.
  const int port_;
  std::vector<std::thread> threads_;
  std::once_flag stop_once_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_HTTP_HTTP_SERVER_H_
