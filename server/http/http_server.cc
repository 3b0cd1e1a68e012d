#include "server/http/http_server.h"

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cstdio>
#include <exception>
#include <optional>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::chrono::milliseconds kAcceptRetryDelay(100);
// How long a refused client may go on sending before its connection closes.
constexpr std::chrono::seconds kLingerTimeout(5);
// Beast's encoding of HTTP/1.1, for answers to requests that did not parse.
constexpr unsigned kHttp11 = 11;

std::string ToString(boost::string_view s) { return std::string(s.data(), s.size()); }

bool IsHttpParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category();
}

// "host:port" -> endpoint. Brackets around an IPv6 host are optional.
absl::StatusOr<tcp::endpoint> ResolveListenAddress(const std::string& name,
                                                   const std::string& address,
                                                   asio::io_context& io) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(name, " listen address \"", address,
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
    return absl::InvalidArgumentError(absl::StrCat(name, " listen address \"", address,
                                                   "\": cannot resolve \"", host,
                                                   "\": ", ec ? ec.message() : "no addresses"));
  }
  return results.begin()->endpoint();
}

// A server context for `files`, or why it cannot be made.
absl::StatusOr<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const TlsFiles& files) {
  REPLICAD_RETURN_IF_ERROR(CheckTlsFiles(files));
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  beast::error_code ec;
  context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                           asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1,
                       ec);
  if (!ec) context->use_certificate_chain_file(files.cert, ec);
  if (!ec) context->use_private_key_file(files.key, asio::ssl::context::pem, ec);
  if (!ec && !files.client_ca.empty()) {
    context->load_verify_file(files.client_ca, ec);
    if (!ec) {
      context->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
    }
  }
  // CheckTlsFiles loaded the same files a moment ago: only a rewrite in
  // between gets here.
  if (ec) return absl::InvalidArgumentError(absl::StrCat("TLS files: ", ec.message()));
  return context;
}

// Method, path, query and headers of a request (its body aside).
template <typename Header>
void FillHead(const Header& header, HttpRequest* out) {
  out->method = ToString(header.method_string());
  const std::string target = ToString(header.target());
  const size_t question = target.find('?');
  out->path = target.substr(0, question);
  if (question != std::string::npos) out->query = target.substr(question + 1);
  for (const auto& field : header) {
    out->headers.emplace_back(ToString(field.name_string()), ToString(field.value()));
  }
}

absl::Status ListenError(const std::string& name, const std::string& address,
                         absl::string_view step, const beast::error_code& ec) {
  std::string message = absl::StrCat(name, " cannot ", step, " ", address, ": ", ec.message());
  if (ec == asio::error::access_denied) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

}  // namespace

const std::string* HttpRequest::Header(const std::string& name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

namespace {

// What connections share with the server: its options and handler, and the
// count of responders still out. Apart from the I/O machinery so that a late
// responder finds it, stopped, rather than freed memory.
class ServerState {
 public:
  ServerState(HttpServer::Options options, HttpHandler handler,
              std::shared_ptr<asio::ssl::context> tls)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        tls_(std::move(tls)),
        tls_version_(TlsFilesVersion(options_.tls)),
        tls_looked_(std::chrono::steady_clock::now()) {}

  const HttpServer::Options& options() const { return options_; }
  const HttpHandler& handler() const { return handler_; }

  // The TLS context for a new connection (null: plain HTTP), made again
  // from the files when they changed since it was last looked at.
  std::shared_ptr<asio::ssl::context> TlsContext() {
    if (!options_.tls.enabled()) return nullptr;
    absl::MutexLock lock(&mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - tls_looked_ < std::chrono::seconds(1)) return tls_;
    tls_looked_ = now;
    const std::string version = TlsFilesVersion(options_.tls);
    if (version == tls_version_ || version == tls_failed_version_) return tls_;
    absl::StatusOr<std::shared_ptr<asio::ssl::context>> reloaded = MakeTlsContext(options_.tls);
    if (!reloaded.ok()) {
      tls_failed_version_ = version;  // Said once, tried again when the files change again.
      // Mid-rotation (a key written before its certificate): keep serving
      // with the old pair and look again.
      LogWarning(absl::StrCat(options_.name, ": the TLS files changed but do not load (",
                              reloaded.status().message(), "); still serving the previous ones"));
      return tls_;
    }
    tls_ = *std::move(reloaded);
    tls_version_ = version;
    return tls_;
  }

  // Counts a responder until it finishes; false once stopped.
  bool AddResponder() {
    absl::MutexLock lock(&mu_);
    if (stopped_) return false;
    ++outstanding_responders_;
    return true;
  }
  // Runs `work` on the server's threads, or destroys it once stopped (with
  // whatever connection it holds, before the I/O machinery can go), and
  // uncounts its responder.
  template <typename Work>
  void FinishResponder(const asio::any_io_executor& executor, Work work) {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      asio::post(executor, std::move(work));
    } else {
      Work dropped = std::move(work);
    }
    --outstanding_responders_;
  }

  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }

  // Counts a connection; false when max_connections are open already.
  bool AddConnection() {
    if (connections_.fetch_add(1) < options_.max_connections) return true;
    connections_.fetch_sub(1);
    return false;
  }
  void RemoveConnection() { connections_.fetch_sub(1); }
  // After Stop: every responder has been called or destroyed.
  void AwaitResponders() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* outstanding) { return *outstanding == 0; }, &outstanding_responders_));
  }

 private:
  const HttpServer::Options options_;
  const HttpHandler handler_;
  absl::Mutex mu_;
  std::shared_ptr<asio::ssl::context> tls_ ABSL_GUARDED_BY(mu_);
  std::string tls_version_ ABSL_GUARDED_BY(mu_);
  std::string tls_failed_version_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point tls_looked_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int outstanding_responders_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int> connections_{0};
};

}  // namespace

// The I/O machinery. Destroying it closes the acceptor, then the io_context
// destroys the handlers still queued, and with them every connection.
class HttpServer::Impl {
 public:
  explicit Impl(std::shared_ptr<ServerState> shared)
      : shared_(std::move(shared)), io_(shared_->options().threads) {}

  absl::StatusOr<int> Listen(const std::string& address) {
    const std::string& name = shared_->options().name;
    absl::StatusOr<tcp::endpoint> endpoint = ResolveListenAddress(name, address, io_);
    if (!endpoint.ok()) return endpoint.status();
    beast::error_code ec;
    acceptor_.open(endpoint->protocol(), ec);
    if (ec) return ListenError(name, address, "open a socket for", ec);
    // Lets a restarted daemon bind while the old connections sit in TIME_WAIT;
    // on Linux it does not let two listeners share the port.
    acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    acceptor_.bind(*endpoint, ec);
    if (ec) return ListenError(name, address, "bind", ec);
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return ListenError(name, address, "listen on", ec);
    const tcp::endpoint local = acceptor_.local_endpoint(ec);
    if (ec) return ListenError(name, address, "read the bound port of", ec);
    Accept();
    return local.port();
  }

  void Run() {
    // Nothing in a handler should throw, but an allocation can; losing the
    // endpoint, or the whole daemon, over one request is worse than dropping
    // that request and carrying on.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        LogError(absl::StrCat(shared_->options().name, ": dropped a request: ", e.what()));
      }
    }
  }

  void StopIo() {
    shared_->Stop();
    io_.stop();
  }
  void AwaitResponders() { shared_->AwaitResponders(); }

 private:
  void Accept();

  const std::shared_ptr<ServerState> shared_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer retry_timer_{io_};
};

namespace {

// One connection: read a request, hand it over, write the answer, repeat
// while keep-alive holds. Lives as long as an operation or a responder of it
// is pending (each holds it). One operation at a time, so its handlers never
// run concurrently even on a multi-threaded server.
// `Stream` is beast::tcp_stream, or an ssl_stream over one for HTTPS.
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  using std::enable_shared_from_this<Session<Stream>>::shared_from_this;
  Session(tcp::socket socket, std::shared_ptr<ServerState> server)
      : stream_(std::move(socket)), server_(std::move(server)) {}
  Session(tcp::socket socket, std::shared_ptr<ServerState> server,
          std::shared_ptr<asio::ssl::context> tls)
      : tls_(std::move(tls)), stream_(std::move(socket), *tls_), server_(std::move(server)) {}

  // The TLS handshake (HTTPS), then the first request.
  void Start() {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      ReadRequest();
    } else {
      Lowest().expires_after(server_->options().idle_timeout);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = shared_from_this()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->ReadRequest();
                              });
    }
  }

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() { server_->RemoveConnection(); }

  // The header first, so that a client waiting for "100 Continue" gets it
  // and a transfer coding we cannot read is refused before its body.
  void ReadRequest() {
    parser_.emplace();
    parser_->header_limit(server_->options().header_limit);
    parser_->body_limit(server_->options().body_limit);
    Lowest().expires_after(server_->options().idle_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Writes `response` to the request being answered (on a server thread).
  void Write(HttpResponse response) {
    response_ = {};
    response_.result(static_cast<unsigned>(response.status));
    response_.version(version_);
    response_.set(http::field::server, "replicad");
    response_.set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) response_.set(name, value);
    response_.keep_alive(keep_alive_);
    response_.content_length(response.body.size());
    if (!head_) response_.body() = std::move(response.body);
    Lowest().expires_after(server_->options().idle_timeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (!ec && self->linger_) return self->Linger();
                        if (ec || !self->keep_alive_) return self->Close();
                        self->ReadRequest();
                      });
  }

  // After refusing a request whose body is still arriving: stop sending,
  // then read and drop what the client sends for a while before closing, so
  // that it reads the refusal rather than a reset connection.
  void Linger() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().expires_after(kLingerTimeout);
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->Close();
                              self->Linger();
                            });
  }

  void Close() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().socket().close(ignored);
  }

  asio::any_io_executor executor() { return stream_.get_executor(); }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    const http::request<http::string_body>& header = parser_->get();
    // Beast reads chunked bodies and Content-Length ones; any other final
    // coding would leave the body to be read as the next request (RFC 9112
    // 6.3: refuse it and close).
    if (header.find(http::field::transfer_encoding) != header.end() && !parser_->chunked()) {
      PrepareRefusal();
      return WriteError(
          501, absl::StrCat("Transfer-Encoding '", ToString(header[http::field::transfer_encoding]),
                            "' is not supported; send the body with "
                            "Content-Length or chunked"));
    }
    if (const auto& screen = server_->options().screen) {
      HttpRequest head;
      FillHead(header, &head);
      if (std::optional<HttpResponse> refused = screen(head)) {
        PrepareRefusal();
        return Write(*std::move(refused));
      }
    }
    auto read_body = [self = shared_from_this()] {
      self->Lowest().expires_after(self->server_->options().idle_timeout);
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code body_ec, size_t) { self->OnRead(body_ec); });
    };
    if (beast::iequals(header[http::field::expect], "100-continue") && !parser_->is_done()) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      return asio::async_write(
          stream_, asio::buffer(kContinue, sizeof(kContinue) - 1),
          [self = shared_from_this(), read_body](beast::error_code write_ec, size_t) {
            if (write_ec) return self->Close();
            read_body();
          });
    }
    read_body();
  }

  // For answers to requests that cannot be read: HTTP/1.1, then close.
  void PrepareRefusal() {
    version_ = kHttp11;
    keep_alive_ = false;
    head_ = false;
    linger_ = true;
  }

  void OnRead(beast::error_code ec) {
    if (ec) {
      // A client that sent garbage, or too much, is told so; one that went
      // away, or timed out, gets nothing.
      if (ec == http::error::end_of_stream || !IsHttpParseError(ec)) return Close();
      PrepareRefusal();
      if (ec == http::error::body_limit) {
        return WriteError(413, absl::StrCat("request body is larger than this server's limit of ",
                                            server_->options().body_limit, " bytes"));
      }
      if (ec == http::error::header_limit) {
        return WriteError(431, absl::StrCat("request header is larger than this server's limit of ",
                                            server_->options().header_limit, " bytes"));
      }
      return WriteError(400, absl::StrCat("bad request: ", ec.message()));
    }
    http::request<http::string_body> request = parser_->release();
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    head_ = request.method() == http::verb::head;
    HttpRequest out;
    FillHead(request, &out);
    out.body = std::move(request.body());
    server_->handler()(std::move(out), Responder());
  }

  void WriteError(int status, const std::string& message) {
    const auto& render = server_->options().render_error;
    Write(render ? render(status, message)
                 : HttpResponse{status, "text/plain; charset=utf-8", {}, message + "\n"});
  }

  // The handler's way back: answers on a server thread, once.
  HttpResponder Responder() {
    if (!server_->AddResponder()) return [](HttpResponse) {};
    struct Answer {
      explicit Answer(std::shared_ptr<Session> s) : session(std::move(s)) {}
      Answer(Answer&&) = default;  // Leaves the moved-from one empty.
      Answer& operator=(Answer&&) = delete;
      std::shared_ptr<Session> session;
      ~Answer() {
        if (session == nullptr) return;  // Answered, or moved from.
        std::shared_ptr<Session> s = std::move(session);
        ServerState& server = *s->server_;
        const asio::any_io_executor executor = s->executor();
        server.FinishResponder(executor, [s = std::move(s)] { s->Close(); });
      }
    };
    return [answer = Answer(shared_from_this())](HttpResponse response) mutable {
      std::shared_ptr<Session> s = std::move(answer.session);
      ServerState& server = *s->server_;
      const asio::any_io_executor executor = s->executor();
      server.FinishResponder(executor,
                             [s = std::move(s), response = std::move(response)]() mutable {
                               s->Write(std::move(response));
                             });
    };
  }

  const std::shared_ptr<asio::ssl::context> tls_;  // HTTPS: outlives stream_.
  Stream stream_;
  const std::shared_ptr<ServerState> server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  unsigned version_ = kHttp11;
  bool keep_alive_ = false;
  bool linger_ = false;
  char scratch_[16 * 1024];
  bool head_ = false;
};

}  // namespace

void HttpServer::Impl::Accept() {
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
    // Beyond the cap a connection is closed at once: idle connections must
    // not take every descriptor the process has (and with them the gRPC port).
    if (!shared_->AddConnection()) {
      beast::error_code ignored;
      socket.close(ignored);
    } else if (std::shared_ptr<asio::ssl::context> tls = shared_->TlsContext()) {
      std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(std::move(socket), shared_,
                                                                      std::move(tls))
          ->Start();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(std::move(socket), shared_)->Start();
    }
    Accept();
  });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen_address,
                                                              Options options,
                                                              HttpHandler handler) {
  options.threads = std::max(options.threads, 1);
  const int threads = options.threads;
  std::shared_ptr<asio::ssl::context> tls;
  if (options.tls.enabled()) {
    absl::StatusOr<std::shared_ptr<asio::ssl::context>> made = MakeTlsContext(options.tls);
    if (!made.ok()) return made.status();
    tls = *std::move(made);
  }
  auto impl = std::make_unique<Impl>(
      std::make_shared<ServerState>(std::move(options), std::move(handler), std::move(tls)));
  REPLICAD_ASSIGN_OR_RETURN(int port, impl->Listen(listen_address));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl), port, threads));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl, int port, int threads)
    : impl_(std::move(impl)), port_(port) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([impl = impl_.get()] { impl->Run(); });
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  std::call_once(stop_once_, [this] {
    impl_->StopIo();
    for (std::thread& t : threads_) t.join();
    impl_->AwaitResponders();
    impl_.reset();
  });
}

}  // namespace replicad
