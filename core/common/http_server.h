// A small HTTP/1.1 server for operational endpoints: Prometheus /metrics, /healthz. Not for
// data (the frontend's OpenAI API has its own, frontend/openai_server.h). On cpp-httplib:
// kHttpConnectionThreads threads serve one request per connection (Connection: close), and a
// connection that sends nothing for a second is dropped, so a few stalled clients cannot keep a
// health probe waiting. Only GET is served: any other method is 405 (Allow: GET), an unknown path
// 404, a malformed request or an oversized head 400; a client that stalls mid-request or
// mid-response for more than io_timeout (2 s) is dropped. Handlers may run on several threads at
// once. Binds to 127.0.0.1 unless told otherwise.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace glimpse {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port (see HttpServer::port())
  // A client that has not sent its whole request (or taken the response) by then is dropped;
  // the budget is per connection, so a client trickling bytes cannot hold the thread longer.
  absl::Duration io_timeout = absl::Seconds(2);
};

inline constexpr int kHttpConnectionThreads = 4;

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;  // called on a connection thread

  // Binds and starts serving; errors name the address (e.g. port in use).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           std::map<std::string, Handler> routes);
  virtual ~HttpServer() = default;  // stops accepting and joins the thread
  virtual int port() const = 0;
};

// For servers on cpp-httplib (this one, the frontend's OpenAI API): bind without SO_REUSEPORT, so
// a port in use is an error; and, after starting the listen thread, wait until it runs, so that a
// server stopped at once does not hang.
void NoPortSharing(httplib::Server& http);
void WaitUntilRunning(httplib::Server& http);

// "host:port" or "[v6]:port" (port 0: ephemeral) as options; the error names `key`.
absl::StatusOr<HttpServerOptions> ParseHttpAddress(const std::string& address,
                                                   std::string_view key);

// GETs http://host:port/path and returns the body of a 200, else an error naming the status.
// For tests and tools.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path);

}  // namespace glimpse
