// A minimal HTTP/1.1 server for operational endpoints: Prometheus /metrics, /healthz. Not for
// data. One accept thread hands connections to kHttpConnectionThreads threads, each serving one
// connection at a time, then closing it (Connection: close), so a few stalled clients cannot keep
// a health probe waiting; connections accepted beyond kHttpMaxQueued waiting ones are closed at
// once. Only GET is served: any other method is 405, an unknown path 404, a request line or
// header block over 8 KiB or malformed 400; a client that stalls for more than io_timeout (2 s)
// is dropped. Handlers may run on several threads at once. Binds to 127.0.0.1 unless told
// otherwise.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

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
inline constexpr size_t kHttpMaxQueued = 64;

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;  // called on a connection thread

  // Binds and starts serving; errors name the address (e.g. port in use).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           std::map<std::string, Handler> routes);
  virtual ~HttpServer() = default;  // stops accepting and joins the thread
  virtual int port() const = 0;
};

// "host:port" or "[v6]:port" (port 0: ephemeral) as options; the error names `key`.
absl::StatusOr<HttpServerOptions> ParseHttpAddress(const std::string& address,
                                                   std::string_view key);

// GETs http://host:port/path and returns the body of a 200, else an error naming the status.
// For tests and tools.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path);

}  // namespace glimpse
