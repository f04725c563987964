// OpenAiServer: the frontend's OpenAI-compatible HTTP API (docs/openai_api.md) on cpp-httplib
// (Debian's libcpp-httplib-dev): POST /v1/chat/completions and /v1/completions (JSON, or
// server-sent events with "stream": true), GET /v1/models.
//
// Each request becomes one Generate call on the frontend's own gRPC service through an in-process
// channel (openai_api.h translates), so authentication (the Authorization header is forwarded as
// the call's metadata: the same bearer tokens), tenancy, limits, routing and the gRPC metrics are
// exactly the gRPC API's. The first event of the call decides the HTTP status: an error before
// any token is an OpenAI error body with its status (openai::ErrorFromStatus); once streaming has
// begun, an error is one `data: {"error": ...}` event before `data: [DONE]`. A client that goes
// away cancels its turn. A one-off session (the request names none) is ended after the reply.
//
// Bounds: `threads` connections are served at once (more wait in the listen queue); a body over
// max_body_bytes is 413; a client that stalls reading or writing for io_timeout is dropped; JSON
// nesting is bounded before parsing (openai_api.h).
//
// Metrics: glimpse_frontend_http_requests_total{endpoint,status}.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/common/grpc/server.h"
#include "core/common/metrics.h"
#include "grpcpp/channel.h"

namespace glimpse::frontend {

struct OpenAiServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;          // 0: an ephemeral port (see port())
  std::string model_id;  // the model /v1/models lists and requests name
  int threads = 16;
  int64_t max_body_bytes = int64_t{4} << 20;
  absl::Duration io_timeout = absl::Seconds(30);
  TlsFiles tls;  // cert_file set: HTTPS (ca_file set: clients must present a certificate)
};

class OpenAiServer {
 public:
  // Binds and serves; errors name the address (e.g. port in use) or an unusable certificate.
  // `frontend` is a channel to the glimpse.v1.Frontend service; `registry` must outlive this.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(
      const OpenAiServerOptions& options, std::shared_ptr<grpc::Channel> frontend,
      metrics::MetricsRegistry& registry);
  virtual ~OpenAiServer() = default;  // stops accepting, waits for requests in flight
  virtual int port() const = 0;
};

}  // namespace glimpse::frontend
