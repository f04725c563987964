#include "core/common/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/common/status_macros.h"

namespace glimpse {
namespace {

// Only GET is served: no request body is read.
constexpr size_t kMaxBodyBytes = 0;

}  // namespace

void NoPortSharing(httplib::Server& http) {
  // httplib's default also sets SO_REUSEPORT, which would let a second server bind a port in use.
  http.set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

void WaitUntilRunning(httplib::Server& http) {
  // stop() before the listen loop has started would leave it running forever.
  while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

namespace {

class HttpServerImpl final : public HttpServer {
 public:
  explicit HttpServerImpl(std::map<std::string, Handler> routes) : routes_(std::move(routes)) {}
  ~HttpServerImpl() override {
    http_.stop();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Listen(const HttpServerOptions& options) {
    http_.new_task_queue = [] { return new httplib::ThreadPool(kHttpConnectionThreads); };
    const auto timeout = absl::ToChronoMicroseconds(options.io_timeout);
    http_.set_read_timeout(timeout);
    http_.set_write_timeout(timeout);
    // One request per connection, and a connection that sends nothing is dropped within a
    // second, so idle clients hold no thread (nor the destructor) for long.
    http_.set_keep_alive_max_count(1);
    http_.set_keep_alive_timeout(1);
    http_.set_payload_max_length(kMaxBodyBytes);
    NoPortSharing(http_);
    http_.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (req.method == "GET") return httplib::Server::HandlerResponse::Unhandled;
      res.status = 405;
      res.set_header("Allow", "GET");
      return httplib::Server::HandlerResponse::Handled;
    });
    for (const auto& [path, handler] : routes_) {
      http_.Get(path, [&handler = handler](const httplib::Request&, httplib::Response& res) {
        HttpResponse r = handler();
        res.status = r.status;
        res.set_content(std::move(r.body), r.content_type);
      });
    }
    port_ = options.port == 0
                ? http_.bind_to_any_port(options.host)
                : (http_.bind_to_port(options.host, options.port) ? options.port : -1);
    if (port_ <= 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options.host, ":", options.port, " (address in use?)"));
    }
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    WaitUntilRunning(http_);
    return absl::OkStatus();
  }

  int port() const override { return port_; }

 private:
  const std::map<std::string, Handler> routes_;
  httplib::Server http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, std::map<std::string, Handler> routes) {
  auto server = std::make_unique<HttpServerImpl>(std::move(routes));
  RETURN_IF_ERROR(server->Listen(options));
  return server;
}

absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path) {
  const std::string where = absl::StrCat(host, ":", port, path);
  httplib::Client client(host, port);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::seconds(10));
  client.set_write_timeout(std::chrono::seconds(10));
  httplib::Result res = client.Get(path);
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("GET ", where, ": ", httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    const std::string message = absl::StrCat("GET ", where, ": HTTP ", res->status);
    if (res->status == 404) return absl::NotFoundError(message);
    return res->status >= 500 ? absl::UnavailableError(message)
                              : absl::InvalidArgumentError(message);
  }
  return std::move(res->body);
}

absl::StatusOr<HttpServerOptions> ParseHttpAddress(const std::string& address,
                                                   std::string_view key) {
  HttpServerOptions options;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &options.port) ||
      options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad value for ", std::string(key), ": '", address, "' (want host:port)"));
  }
  absl::string_view host = absl::string_view(address).substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  options.host = std::string(host);
  return options;
}

}  // namespace glimpse
