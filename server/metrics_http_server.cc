#include "server/metrics_http_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/metrics/text_format.h"

namespace replicad {
namespace {

constexpr char kPlainText[] = "text/plain; charset=utf-8";

HttpResponse Plain(int status, std::string body) {
  return HttpResponse{status, kPlainText, {}, std::move(body)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen_address, const metrics::Registry& registry, Options metrics_options) {
  HttpServer::Options options;
  options.name = "metrics endpoint";
  // Scrapes are GETs without bodies; the limits only bound what a broken or
  // hostile client can make us buffer.
  options.header_limit = 8 * 1024;
  options.body_limit = 64 * 1024;
  options.max_connections = 64;
  options.tls = metrics_options.tls;
  HttpHandler handler = [&registry, ready = std::move(metrics_options.ready),
                         authorize = std::move(metrics_options.authorize)](HttpRequest request,
                                                                           HttpResponder respond) {
    const bool is_metrics = request.path == "/metrics";
    if (!is_metrics && request.path != "/healthz") {
      return std::move(respond)(Plain(404, "not found\n"));
    }
    if (request.method != "GET" && request.method != "HEAD") {
      HttpResponse refused = Plain(405, "method not allowed\n");
      refused.headers.emplace_back("Allow", "GET, HEAD");
      return std::move(respond)(std::move(refused));
    }
    if (is_metrics && authorize) {
      if (absl::Status access = authorize(request); !access.ok()) {
        HttpResponse refused = Plain(absl::IsUnauthenticated(access) ? 401 : 403,
                                     absl::StrCat(access.message(), "\n"));
        if (absl::IsUnauthenticated(access))
          refused.headers.emplace_back("WWW-Authenticate", "Bearer");
        return std::move(respond)(std::move(refused));
      }
    }
    if (is_metrics) {
      return std::move(respond)(
          HttpResponse{200, std::string(metrics::kTextFormatContentType), {}, registry.Render()});
    }
    if (!ready || ready()) return std::move(respond)(Plain(200, "ok\n"));
    std::move(respond)(Plain(503, "not ready\n"));
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(listen_address, std::move(options), std::move(handler));
  if (!server.ok()) return server.status();
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(*std::move(server)));
}

}  // namespace replicad
