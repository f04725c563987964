#include "core/common/http_server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace glimpse {
namespace {

std::unique_ptr<HttpServer> StartOrDie(HttpServerOptions options = {}) {
  auto server =
      HttpServer::Start(options, {{"/metrics",
                                   [] {
                                     return HttpResponse{200, "text/plain; version=0.0.4", "m 1\n"};
                                   }},
                                  {"/healthz", [] {
                                     return HttpResponse{503, "text/plain", "stopping\n"};
                                   }}});
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(server).value();
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

// Sends `request` raw and returns everything the server writes before closing.
std::string RawExchange(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(HttpServerTest, ServesRegisteredPath) {
  auto server = StartOrDie();
  ASSERT_GT(server->port(), 0);
  EXPECT_EQ(HttpGet("127.0.0.1", server->port(), "/metrics").value(), "m 1\n");
  const std::string raw =
      RawExchange(server->port(), "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(raw, "HTTP/1.1 200 OK\r\n")) << raw;
  for (const char* header : {"Content-Type: text/plain; version=0.0.4\r\n", "Content-Length: 4\r\n",
                             "Connection: close\r\n"}) {
    EXPECT_TRUE(absl::StrContains(raw, header)) << raw;
  }
  EXPECT_TRUE(absl::EndsWith(raw, "\r\n\r\nm 1\n")) << raw;
}

TEST(HttpServerTest, UnknownPathIs404) {
  auto server = StartOrDie();
  const auto body = HttpGet("127.0.0.1", server->port(), "/nope");
  EXPECT_EQ(body.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(body.status().message(), "HTTP 404")) << body.status();
}

TEST(HttpServerTest, HandlerStatusIsPassedThrough) {
  auto server = StartOrDie();
  const auto body = HttpGet("127.0.0.1", server->port(), "/healthz");
  EXPECT_TRUE(absl::StrContains(body.status().message(), "HTTP 503")) << body.status();
}

TEST(HttpServerTest, OtherMethodsAre405) {
  auto server = StartOrDie();
  const std::string raw = RawExchange(server->port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(raw, "HTTP/1.1 405 Method Not Allowed\r\n")) << raw;
  EXPECT_TRUE(absl::StrContains(raw, "Allow: GET\r\n")) << raw;
}

TEST(HttpServerTest, MalformedRequestsAre400) {
  auto server = StartOrDie();
  for (const std::string request : {"garbage\r\n\r\n", "GET /metrics SPDY/3\r\n\r\n"}) {
    const std::string raw = RawExchange(server->port(), request);
    EXPECT_TRUE(absl::StartsWith(raw, "HTTP/1.1 400 Bad Request\r\n")) << request << " -> " << raw;
  }
}

TEST(HttpServerTest, HeadOver8KiBIs400) {
  auto server = StartOrDie();
  const std::string big = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(9000, 'a') + "\r\n\r\n";
  const std::string raw = RawExchange(server->port(), big);
  EXPECT_TRUE(absl::StartsWith(raw, "HTTP/1.1 400 Bad Request\r\n")) << raw.substr(0, 100);
}

TEST(HttpServerTest, StalledClientIsDroppedAndOthersAreServedAfter) {
  HttpServerOptions options;
  options.io_timeout = absl::Milliseconds(50);
  auto server = StartOrDie(options);
  // An incomplete head: the server gives up on it (400) and closes the connection.
  EXPECT_TRUE(absl::StartsWith(RawExchange(server->port(), "GET /metrics HTTP/1.1\r\n"),
                               "HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_EQ(HttpGet("127.0.0.1", server->port(), "/metrics").value(), "m 1\n");
}

// Stalled clients hold one connection thread each, not the server: with a budget far past
// HttpGet's own 10 s deadline, a GET beside kHttpConnectionThreads - 1 stalled clients is served.
TEST(HttpServerTest, StalledClientsDoNotHoldOthers) {
  HttpServerOptions options;
  options.io_timeout = absl::Minutes(5);
  auto server = StartOrDie(options);
  std::vector<int> stalled;
  for (int i = 0; i + 1 < kHttpConnectionThreads; ++i) stalled.push_back(Connect(server->port()));
  EXPECT_EQ(HttpGet("127.0.0.1", server->port(), "/metrics").value(), "m 1\n");
  for (int fd : stalled) close(fd);
}

TEST(HttpServerTest, DestructorInterruptsAConnectedClient) {
  HttpServerOptions options;
  options.io_timeout = absl::Minutes(5);  // the destructor must not wait for it
  auto server = StartOrDie(options);
  const int fd = Connect(server->port());
  const absl::Time start = absl::Now();
  server.reset();
  // Far below io_timeout (what waiting for the client would take), so a loaded machine passes.
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));
  close(fd);
}

TEST(HttpServerTest, PortInUseNamesTheAddress) {
  auto first = StartOrDie();
  HttpServerOptions options;
  options.port = first->port();
  const auto second = HttpServer::Start(options, {});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(
      absl::StrContains(second.status().message(), "127.0.0.1:" + std::to_string(first->port())))
      << second.status();
}

TEST(HttpGetTest, ConnectionRefusedIsUnavailable) {
  int port;
  {
    auto server = StartOrDie();
    port = server->port();
  }
  EXPECT_EQ(HttpGet("127.0.0.1", port, "/metrics").status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace glimpse
