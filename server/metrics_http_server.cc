#include "server/metrics_http_server.h"

#include <functional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/metrics/text_format.h"

namespace replicad {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Scrapes are GETs without bodies; the limits only bound what a broken or
// hostile client can make us buffer.
constexpr size_t kHeaderLimit = 8 * 1024;
constexpr size_t kBodyLimit = 64 * 1024;
constexpr std::chrono::seconds kIdleTimeout(30);
constexpr std::chrono::milliseconds kAcceptRetryDelay(100);
constexpr absl::string_view kPlainText = "text/plain; charset=utf-8";
// Beast's encoding of HTTP/1.1, for answers to requests that did not parse.
constexpr unsigned kHttp11 = 11;

absl::string_view ToStringView(boost::string_view s) { return {s.data(), s.size()}; }

bool IsHttpParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category();
}

// One connection: read a request, answer it, repeat while keep-alive holds.
// Lives as long as an operation of it is pending (each handler holds it).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const metrics::Registry& registry,
          const std::function<bool()>& ready)
      : stream_(std::move(socket)), registry_(registry), ready_(ready) {}

  void ReadRequest() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(kIdleTimeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) {
      // A client that sent garbage gets told so; one that went away, or timed
      // out, gets nothing.
      if (ec != http::error::end_of_stream && IsHttpParseError(ec)) {
        Respond(http::status::bad_request, kHttp11, false, false,
                absl::StrCat("bad request: ", ec.message(), "\n"), kPlainText);
      } else {
        Close();
      }
      return;
    }
    const http::request<http::string_body>& request = parser_->get();
    const bool keep_alive = request.keep_alive();
    const unsigned version = request.version();
    absl::string_view path = ToStringView(request.target());
    path = path.substr(0, path.find('?'));
    const bool is_metrics = path == "/metrics";
    if (!is_metrics && path != "/healthz") {
      return Respond(http::status::not_found, version, keep_alive, false, "not found\n",
                     kPlainText);
    }
    const http::verb method = request.method();
    if (method != http::verb::get && method != http::verb::head) {
      return Respond(http::status::method_not_allowed, version, keep_alive, false,
                     "method not allowed\n", kPlainText);
    }
    const bool head = method == http::verb::head;
    if (is_metrics) {
      Respond(http::status::ok, version, keep_alive, head, registry_.Render(),
              metrics::kTextFormatContentType);
    } else if (!ready_ || ready_()) {
      Respond(http::status::ok, version, keep_alive, head, "ok\n", kPlainText);
    } else {
      Respond(http::status::service_unavailable, version, keep_alive, head, "not ready\n",
              kPlainText);
    }
  }

  void Respond(http::status status, unsigned version, bool keep_alive, bool head, std::string body,
               absl::string_view content_type) {
    response_ = {};
    response_.result(status);
    response_.version(version);
    response_.set(http::field::server, "replicad");
    response_.set(http::field::content_type,
                  boost::string_view(content_type.data(), content_type.size()));
    if (status == http::status::method_not_allowed) response_.set(http::field::allow, "GET, HEAD");
    response_.keep_alive(keep_alive);
    response_.content_length(body.size());
    if (!head) response_.body() = std::move(body);
    stream_.expires_after(kIdleTimeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this(), keep_alive](beast::error_code ec, size_t) {
                        if (ec || !keep_alive) return self->Close();
                        self->ReadRequest();
                      });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  const metrics::Registry& registry_;
  const std::function<bool()>& ready_;
};

// "host:port" -> endpoint. Brackets around an IPv6 host are optional.
absl::StatusOr<tcp::endpoint> ResolveListenAddress(const std::string& address,
                                                   asio::io_context& io) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics listen address \"", address,
                                                   "\" is not host:port with a port in 0..65535"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  beast::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(ip, static_cast<unsigned short>(port));
  tcp::resolver resolver(io);
  const tcp::resolver::results_type results =
      resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics listen address \"", address,
                                                   "\": cannot resolve \"", host,
                                                   "\": ", ec ? ec.message() : "no addresses"));
  }
  return results.begin()->endpoint();
}

absl::Status ListenError(const std::string& address, absl::string_view step,
                         const beast::error_code& ec) {
  std::string message =
      absl::StrCat("metrics endpoint cannot ", step, " ", address, ": ", ec.message());
  if (ec == asio::error::access_denied) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

}  // namespace

// The I/O machinery. Destroying it closes the acceptor, then the io_context
// destroys the handlers still queued, and with them every Session.
class MetricsHttpServer::Impl {
 public:
  Impl(const metrics::Registry& registry, std::function<bool()> ready)
      : registry_(registry), ready_(std::move(ready)) {}

  absl::StatusOr<int> Listen(const std::string& address) {
    absl::StatusOr<tcp::endpoint> endpoint = ResolveListenAddress(address, io_);
    if (!endpoint.ok()) return endpoint.status();
    beast::error_code ec;
    acceptor_.open(endpoint->protocol(), ec);
    if (ec) return ListenError(address, "open a socket for", ec);
    // Lets a restarted daemon bind while the old connections sit in TIME_WAIT;
    // on Linux it does not let two listeners share the port.
    acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    acceptor_.bind(*endpoint, ec);
    if (ec) return ListenError(address, "bind", ec);
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return ListenError(address, "listen on", ec);
    const tcp::endpoint local = acceptor_.local_endpoint(ec);
    if (ec) return ListenError(address, "read the bound port of", ec);
    Accept();
    return local.port();
  }

  void Run() {
    // Nothing in a handler should throw, but an allocation can; losing the
    // metrics endpoint, or the whole daemon, over one scrape is worse than
    // dropping that scrape and carrying on.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "replicad metrics endpoint: dropped a request: %s\n", e.what());
      }
    }
  }

  void StopIo() { io_.stop(); }

 private:
  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of file descriptors and the like: retrying at once would spin.
        retry_timer_.expires_after(kAcceptRetryDelay);
        retry_timer_.async_wait([this](beast::error_code wait_ec) {
          if (!wait_ec) Accept();
        });
        return;
      }
      std::make_shared<Session>(std::move(socket), registry_, ready_)->ReadRequest();
      Accept();
    });
  }

  const metrics::Registry& registry_;
  const std::function<bool()> ready_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  asio::steady_timer retry_timer_{io_};
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen_address, const metrics::Registry& registry,
    std::function<bool()> ready) {
  auto impl = std::make_unique<Impl>(registry, std::move(ready));
  absl::StatusOr<int> port = impl->Listen(listen_address);
  if (!port.ok()) return port.status();
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl), *port));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port), thread_([impl = impl_.get()] { impl->Run(); }) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  std::call_once(stop_once_, [this] {
    impl_->StopIo();
    thread_.join();
    impl_.reset();
  });
}

}  // namespace replicad
