#include "server/metrics_http_server.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/metrics/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using Response = http::response<http::string_body>;

// A blocking HTTP/1.1 client on one connection.
class Client {
 public:
  explicit Client(int port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  Response Fetch(http::verb method, const std::string& target, bool keep_alive = true) {
    http::request<http::string_body> request(method, target, 11);
    request.set(http::field::host, "localhost");
    request.keep_alive(keep_alive);
    http::write(socket_, request);
    http::response_parser<http::string_body> parser;
    parser.skip(method == http::verb::head);
    http::read(socket_, buffer_, parser);
    return parser.release();
  }

  // Sends `bytes` as is, then reads until the server closes.
  std::string SendRaw(const std::string& bytes) {
    asio::write(socket_, asio::buffer(bytes));
    std::string reply;
    beast::error_code ec;
    asio::read(socket_, asio::dynamic_buffer(reply), ec);
    return reply;
  }

  // Sends `bytes` and hangs up without reading.
  void SendAndHangUp(const std::string& bytes) {
    asio::write(socket_, asio::buffer(bytes));
    socket_.close();
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    requests_ = &registry_.AddCounter("replicad_requests_total", "Requests.", {"model"});
    requests_->WithLabels({"m"}).Increment(7);
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start("127.0.0.1:0", registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  metrics::Registry registry_;
  metrics::CounterFamily* requests_ = nullptr;
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpServerTest, ServesTheRegistryAtMetrics) {
  ASSERT_GT(server_->port(), 0);
  Response response = Client(server_->port()).Fetch(http::verb::get, "/metrics");
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(response[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(response.body(), registry_.Render());
  EXPECT_THAT(response.body(), HasSubstr("replicad_requests_total{model=\"m\"} 7\n"));
}

TEST_F(MetricsHttpServerTest, EachScrapeSeesCurrentValuesOnAKeptAliveConnection) {
  Client client(server_->port());
  EXPECT_THAT(client.Fetch(http::verb::get, "/metrics").body(), HasSubstr("{model=\"m\"} 7\n"));
  requests_->WithLabels({"m"}).Increment();
  EXPECT_THAT(client.Fetch(http::verb::get, "/metrics?x=1").body(), HasSubstr("{model=\"m\"} 8\n"));
}

TEST_F(MetricsHttpServerTest, HealthzSaysOk) {
  Response response = Client(server_->port()).Fetch(http::verb::get, "/healthz");
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(response.body(), "ok\n");
}

TEST_F(MetricsHttpServerTest, HeadSendsHeadersOnly) {
  Client client(server_->port());
  Response response = client.Fetch(http::verb::head, "/metrics");
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(response[http::field::content_length], std::to_string(registry_.Render().size()));
  EXPECT_EQ(response.body(), "");
  // Had the body been sent anyway, it would be read as the next response.
  EXPECT_EQ(client.Fetch(http::verb::get, "/healthz").body(), "ok\n");
}

TEST_F(MetricsHttpServerTest, UnknownPathIs404AndOtherMethodsAre405) {
  Client client(server_->port());
  EXPECT_EQ(client.Fetch(http::verb::get, "/").result(), http::status::not_found);
  EXPECT_EQ(client.Fetch(http::verb::get, "/metricsx").result(), http::status::not_found);
  Response post = client.Fetch(http::verb::post, "/metrics");
  EXPECT_EQ(post.result(), http::status::method_not_allowed);
  EXPECT_EQ(post[http::field::allow], "GET, HEAD");
  EXPECT_EQ(client.Fetch(http::verb::delete_, "/healthz").result(),
            http::status::method_not_allowed);
}

TEST_F(MetricsHttpServerTest, MalformedOrOversizedRequestsAreRefusedAndTheServerCarriesOn) {
  EXPECT_THAT(Client(server_->port()).SendRaw("GARBAGE\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Client(server_->port()).SendRaw("GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Client(server_->port())
                  .SendRaw(absl::StrCat("GET /metrics HTTP/1.1\r\nX: ", std::string(20000, 'a'),
                                        "\r\n\r\n")),
              StartsWith("HTTP/1.1 431"));
  EXPECT_THAT(
      Client(server_->port())
          .SendRaw("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\nabc"),
      StartsWith("HTTP/1.1 413"));
  std::string binary(512, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 37);
  Client(server_->port()).SendRaw(binary);
  Client(server_->port()).SendAndHangUp("GET /metrics HTTP/1.1\r\nHo");
  EXPECT_EQ(Client(server_->port()).Fetch(http::verb::get, "/metrics").result(), http::status::ok);
}

TEST_F(MetricsHttpServerTest, ServesConcurrentClients) {
  constexpr int kClients = 8;
  constexpr int kRequestsEach = 25;
  std::vector<int> ok(kClients, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      Client client(server_->port());
      for (int i = 0; i < kRequestsEach; ++i) {
        // Alternate kept-alive requests with fresh connections.
        Response response = i % 2 == 0
                                ? client.Fetch(http::verb::get, "/metrics")
                                : Client(server_->port()).Fetch(http::verb::get, "/metrics", false);
        if (response.result() == http::status::ok &&
            response.body().find("replicad_requests_total") != std::string::npos) {
          ++ok[c];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(ok[c], kRequestsEach) << "client " << c;
}

TEST_F(MetricsHttpServerTest, StopIsIdempotentAndClosesThePort) {
  const int port = server_->port();
  server_->Stop();
  server_->Stop();
  asio::io_context io;
  tcp::socket socket(io);
  beast::error_code ec;
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  EXPECT_EQ(ec, asio::error::connection_refused);
}

TEST(MetricsHttpServerStartTest, BusyPortIsAnErrorNamingTheAddress) {
  metrics::Registry registry;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> first =
      MetricsHttpServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> second =
      MetricsHttpServer::Start(address, registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(address));
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
}

TEST(MetricsHttpServerStartTest, MalformedAddressesAreInvalidArguments) {
  metrics::Registry registry;
  for (const char* address : {"", "9090", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536",
                              "127.0.0.1:-1", "127.0.0.1:http"}) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(address, registry);
    ASSERT_FALSE(server.ok()) << address;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(server.status().message(), HasSubstr(address));
  }
}

TEST(MetricsHttpServerStartTest, AcceptsBracketedIpv6AndHostNames) {
  metrics::Registry registry;
  for (const char* address : {"localhost:0", "[::1]:0"}) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(address, registry);
    if (!server.ok() && std::string(address) == "[::1]:0") {
      GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
    }
    ASSERT_TRUE(server.ok()) << address << ": " << server.status();
    EXPECT_GT((*server)->port(), 0);
  }
}

}  // namespace
}  // namespace replicad
