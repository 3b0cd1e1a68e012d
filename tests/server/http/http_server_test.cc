// The HTTP/1.1 server under both HTTP doors: transfer codings other than chunked are refused
// without reading the body as a next request; chunked bodies; `Expect: 100-continue`; a refused
// body is drained so the client reads the 413; connections beyond the cap are closed and the others
// served; Stop waits for answers still out.

#include "server/http/http_server.h"

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Echoes the method and the body; answers from another thread, as the
// inference door does.
class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServer::Options options = {}) {
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
        "127.0.0.1:0", std::move(options), [](HttpRequest request, HttpResponder respond) {
          std::thread([request = std::move(request), respond = std::move(respond)]() mutable {
            std::move(respond)(
                HttpResponse{200, "text/plain", {}, request.method + " " + request.body});
          }).detach();
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<HttpServer> server_;
};

class Connection {
 public:
  explicit Connection(int port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  void Send(const std::string& bytes) { asio::write(socket_, asio::buffer(bytes)); }
  // Everything until the server closes.
  std::string ReadAll() {
    std::string reply;
    boost::system::error_code ec;
    asio::read(socket_, asio::dynamic_buffer(reply), ec);
    return reply;
  }
  std::string ReadUntil(const std::string& delimiter) {
    std::string reply;
    asio::read_until(socket_, asio::dynamic_buffer(reply), delimiter);
    return reply;
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
};

TEST_F(HttpServerTest, ATransferCodingOtherThanChunkedIsRefusedNotReadAsTheNextRequest) {
  Start();
  Connection connection(server_->port());
  connection.Send(
      "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n"
      "GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string reply = connection.ReadAll();
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 501"));
  EXPECT_THAT(reply, HasSubstr("Transfer-Encoding 'gzip' is not supported"));
  EXPECT_THAT(reply, Not(HasSubstr("GET")));  // No second answer.
}

TEST_F(HttpServerTest, ChunkedBodiesAreRead) {
  Start();
  Connection connection(server_->port());
  connection.Send(
      "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\n");
  EXPECT_THAT(connection.ReadAll(), HasSubstr("POST abc"));
}

TEST_F(HttpServerTest, ExpectContinueIsAnsweredBeforeTheBody) {
  Start();
  Connection connection(server_->port());
  connection.Send(
      "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_EQ(connection.ReadUntil("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  connection.Send("hello");
  const std::string reply = connection.ReadAll();
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(reply, HasSubstr("POST hello"));
}

TEST_F(HttpServerTest, ARefusedBodyIsDrainedSoTheClientReadsTheRefusal) {
  HttpServer::Options options;
  options.body_limit = 16;
  Start(std::move(options));
  Connection connection(server_->port());
  connection.Send("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n");
  connection.Send(std::string(100000, 'x'));  // Not reset midway.
  const std::string reply = connection.ReadAll();
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(reply, HasSubstr("limit of 16 bytes"));
}

TEST_F(HttpServerTest, ConnectionsBeyondTheCapAreClosedAndTheOthersServed) {
  HttpServer::Options options;
  options.max_connections = 4;
  Start(std::move(options));
  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<Connection>(server_->port()));
  // Give the server time to accept those four before the fifth arrives.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Connection refused(server_->port());
  refused.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(refused.ReadAll(), "");  // Closed without an answer.
  idle[0]->Send("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(idle[0]->ReadAll(), StartsWith("HTTP/1.1 200"));
  idle.clear();  // Their slots free up once the server sees them close.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Connection later(server_->port());
  later.Send("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(later.ReadAll(), StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpServerTest, StopWaitsForAnswersStillOutAndDropsThem) {
  std::promise<HttpResponder> handed_over;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1:0", {}, [&handed_over](HttpRequest, HttpResponder respond) {
        handed_over.set_value(std::move(respond));
      });
  ASSERT_TRUE(server.ok()) << server.status();
  Connection connection((*server)->port());
  connection.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  HttpResponder held = handed_over.get_future().get();
  std::atomic<bool> answered{false};
  std::thread answer([&held, &answered] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // After Stop began.
    answered = true;  // Set first: Stop must not return before the call below.
    std::move(held)(HttpResponse{200, "text/plain", {}, "late"});
  });
  (*server)->Stop();
  EXPECT_TRUE(answered);  // Stop waited for the responder.
  answer.join();
  EXPECT_EQ(connection.ReadAll(), "");  // The late answer was dropped.
}

}  // namespace
}  // namespace replicad
