#ifndef REPLICAD_SERVER_METRICS_HTTP_SERVER_H_
#define REPLICAD_SERVER_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/metrics/registry.h"
#include "server/http/http_server.h"

namespace replicad {

// An HTTP/1.1 endpoint for Prometheus to scrape:
//   GET /metrics   200, Content-Type text/plain; version=0.0.4; charset=utf-8,
//                  the registry's Render()
//   GET /healthz   200 "ok" while `ready` says so (or always without one),
//                  else 503 "not ready": the serving core's readiness
//   HEAD on either the same headers without the body (HTTP requires HEAD
//   wherever GET works); other methods on these paths 405 with an Allow
//   header; any other path 404; a query string is ignored.
// A request that does not parse is answered 400, one whose header exceeds
// 8 KiB 431, one whose body exceeds 64 KiB 413, and its connection closed;
// the server carries on. Connections are kept alive as HTTP/1.1 asks and
// closed after 30 s idle (server/http/http_server.h does all of that).
//
// One background thread serves every connection with asynchronous I/O, so
// scrapes never run on, or wait for, inference threads. Thread-safe: Stop and
// port may be called from any thread.
class MetricsHttpServer {
 public:
  // Listens on `listen_address`, "host:port": "0.0.0.0:9090", "127.0.0.1:0"
  // (port 0 picks a free port; see port()), "[::1]:9090", "localhost:9090",
  // ":9090" (all IPv4 interfaces). Returns InvalidArgument when the address
  // does not parse or the host does not resolve, and Unavailable (or
  // PermissionDenied) when the socket cannot be bound or listened on; the
  // message names the address and the operating system's reason.
  // `registry` is not owned and must outlive the server; `ready` is called
  // on the server's thread.
  struct Options {
    std::function<bool()> ready;  // Null: always ready.
    // Asked before /metrics is answered (never /healthz); not OK: 401 (with
    // WWW-Authenticate: Bearer) for Unauthenticated, else 403, with its message.
    std::function<absl::Status(const HttpRequest&)> authorize;
    TlsFiles tls;  // Serves HTTPS when set (see HttpServer::Options::tls).
  };
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& listen_address,
                                                                  const metrics::Registry& registry,
                                                                  Options options);
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen_address, const metrics::Registry& registry,
      std::function<bool()> ready = nullptr) {
    Options options;
    options.ready = std::move(ready);
    return Start(listen_address, registry, std::move(options));
  }

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The port actually bound, e.g. the one chosen for port 0.
  int port() const { return server_->port(); }

  // Closes the listening socket and every open connection (a scrape in flight
  // is dropped), then joins the background thread. Idempotent; blocks until
  // done. Must not be called from the server's own thread (nothing of the
  // caller runs there).
  void Stop() { server_->Stop(); }

 private:
  explicit MetricsHttpServer(std::unique_ptr<HttpServer> server) : server_(std::move(server)) {}

  std::unique_ptr<HttpServer> server_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_METRICS_HTTP_SERVER_H_
