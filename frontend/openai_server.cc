#include "frontend/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <thread>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/common/grpc/status.h"
#include "core/common/http_server.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "frontend/openai_api.h"
#include "glimpse/v1/frontend.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace glimpse::frontend {
namespace {

using nlohmann::json;
using openai::Endpoint;

std::string RandomHex(int bytes) {
  thread_local absl::BitGen bitgen;  // ids only need to be unlikely to collide
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    absl::StrAppendFormat(&out, "%02x", absl::Uniform<uint32_t>(bitgen, 0, 256));
  }
  return out;
}

// One Generate call. A call dropped before its stream ended is cancelled and drained, as gRPC
// wants a reader finished before it goes.
struct Call {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::GenerateEvent>> reader;
  bool finished = false;

  absl::Status Finish() {
    finished = true;
    return FromGrpcStatus(reader->Finish());
  }
  // The caller went away: the turn stops (the frontend and worker see the cancellation).
  void Cancel() {
    if (finished || reader == nullptr) return;
    ctx.TryCancel();
    v1::GenerateEvent e;
    while (reader->Read(&e)) {
    }
    Finish().IgnoreError();
  }
  ~Call() { Cancel(); }
};

std::string Sse(const json& data) { return absl::StrCat("data: ", data.dump(), "\n\n"); }

class Server final : public OpenAiServer {
 public:
  Server(const OpenAiServerOptions& options, std::shared_ptr<grpc::Channel> frontend,
         metrics::MetricsRegistry& registry, std::unique_ptr<httplib::Server> http)
      : options_(options),
        stub_(v1::Frontend::NewStub(std::move(frontend))),
        registry_(registry),
        http_(std::move(http)) {}

  ~Server() override {
    http_->stop();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Listen() {
    Route();
    port_ = options_.port == 0
                ? http_->bind_to_any_port(options_.host)
                : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrFormat(
          "the OpenAI API cannot listen on %s:%d (in use?)", options_.host, options_.port));
    }
    thread_ = std::thread([this] { http_->listen_after_bind(); });
    WaitUntilRunning(*http_);
    return absl::OkStatus();
  }

  int port() const override { return port_; }

 private:
  void Route() {
    http_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Complete(Endpoint::kChat, req, res);
                });
    http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Complete(Endpoint::kCompletion, req, res);
    });
    http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const json model = {{"id", options_.model_id},
                          {"object", "model"},
                          {"created", absl::ToUnixSeconds(started_)},
                          {"owned_by", "glimpse"}};
      res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(),
                      "application/json");
      Count("models", 200);
    });
    // Statuses httplib sets itself (unknown path 404, body too large 413, bad request 400) get
    // OpenAI's error body too.
    http_->set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          openai::ApiError e{res.status, "invalid_request_error", "", "", ""};
          e.message = res.status == 413
                          ? absl::StrFormat("the body is over %d bytes", options_.max_body_bytes)
                      : res.status == 404 ? absl::StrFormat("no route %s %s", req.method, req.path)
                                          : absl::StrFormat("HTTP %d", res.status);
          res.set_content(openai::ErrorBody(e), "application/json");
          Count("other", res.status);
          return httplib::Server::HandlerResponse::Handled;
        }));
  }

  void Count(std::string_view endpoint, int status) {
    registry_
        .AddCounter("glimpse_frontend_http_requests_total",
                    "OpenAI API requests by endpoint and HTTP status.",
                    {{"endpoint", std::string(endpoint)}, {"status", absl::StrCat(status)}})
        .Increment();
  }

  void Fail(std::string_view endpoint, const absl::Status& status, httplib::Response& res) {
    openai::ApiError e = openai::ErrorFromStatus(status);
    if (status.code() == absl::StatusCode::kNotFound &&
        absl::StartsWith(status.message(), "The model")) {
      e.param = "model";
      e.code = "model_not_found";
    }
    res.status = e.http_status;
    res.set_content(openai::ErrorBody(e), "application/json");
    Count(endpoint, e.http_status);
  }

  void Complete(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    const std::string_view name = endpoint == Endpoint::kChat ? "chat" : "completions";
    const openai::RequestHeaders headers{req.get_header_value("X-Glimpse-Session"),
                                         req.get_header_value("X-Glimpse-Tool-Name"),
                                         req.get_header_value("X-Glimpse-Expected-Tool-Ms")};
    absl::StatusOr<openai::ParsedRequest> parsed =
        openai::ParseRequest(endpoint, req.body, headers, options_.model_id);
    if (!parsed.ok()) return Fail(name, parsed.status(), res);
    if (parsed->one_off) parsed->generate.set_session_id("openai-" + RandomHex(12));
    if (!parsed->seeded) {
      thread_local absl::BitGen bitgen;
      parsed->generate.mutable_sampling()->set_seed(absl::Uniform<uint64_t>(bitgen));
    }
    const std::string authorization = req.get_header_value("Authorization");
    auto call = std::make_shared<Call>();
    if (!authorization.empty()) call->ctx.AddMetadata("authorization", authorization);
    call->reader = stub_->Generate(&call->ctx, parsed->generate);
    // The first event (or the error instead of it) decides the HTTP status.
    v1::GenerateEvent first;
    if (!call->reader->Read(&first)) {
      const absl::Status failed = call->Finish();
      EndOneOff(*parsed, authorization);  // a turn that failed after routing left a record
      return Fail(name, failed, res);
    }

    const openai::ResponseHeader header{
        absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", RandomHex(12)),
        absl::ToUnixSeconds(absl::Now()), options_.model_id};
    if (!parsed->stream) return Respond(name, *parsed, header, *call, first, authorization, res);
    Stream(name, *std::move(parsed), header, std::move(call), std::move(first), authorization, res);
  }

  void Respond(std::string_view name, const openai::ParsedRequest& parsed,
               const openai::ResponseHeader& header, Call& call, const v1::GenerateEvent& first,
               const std::string& authorization, httplib::Response& res) {
    openai::TurnSummary turn;
    std::string text;
    v1::GenerateEvent event = first;
    do {
      turn.Add(event);
      if (event.has_tokens()) text += event.tokens().text();
    } while (call.reader->Read(&event));
    const absl::Status status = call.Finish();
    EndOneOff(parsed, authorization);
    if (!status.ok()) return Fail(name, status, res);
    if (!parsed.one_off) turn.session_id = parsed.generate.session_id();
    res.set_content(openai::ResponseBody(parsed.endpoint, header, parsed.tools, text, turn).dump(),
                    "application/json");
    Count(name, 200);
  }

  void Stream(std::string_view name, openai::ParsedRequest parsed, openai::ResponseHeader header,
              std::shared_ptr<Call> call, v1::GenerateEvent first, std::string authorization,
              httplib::Response& res) {
    Count(name, 200);
    auto writer = std::make_shared<openai::ChunkWriter>(parsed.endpoint, header, parsed.tools,
                                                        parsed.include_usage);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, parsed = std::move(parsed), call, writer, first = std::move(first),
         authorization = std::move(authorization)](size_t, httplib::DataSink& sink) {
          StreamEvents(parsed, *call, *writer, first, sink);
          call->Cancel();  // when the client went away mid-stream
          EndOneOff(parsed, authorization);
          return true;
        });
  }

  // Writes the turn's chunks to `sink` until the stream ends or the client goes away (the caller
  // then cancels the call).
  void StreamEvents(const openai::ParsedRequest& parsed, Call& call, openai::ChunkWriter& writer,
                    const v1::GenerateEvent& first, httplib::DataSink& sink) {
    auto send = [&sink](const std::vector<json>& chunks) {
      for (const json& c : chunks) {
        const std::string data = Sse(c);
        if (!sink.write(data.data(), data.size())) return false;
      }
      return true;
    };
    if (!send(writer.Start())) return;
    openai::TurnSummary turn;
    if (!parsed.one_off) turn.session_id = parsed.generate.session_id();
    v1::GenerateEvent event = first;
    do {
      turn.Add(event);
      if (event.has_tokens() && !send(writer.Text(event.tokens().text()))) return;
    } while (call.reader->Read(&event));
    const absl::Status status = call.Finish();
    std::string tail;
    if (status.ok()) {
      for (const json& c : writer.Finish(turn)) tail += Sse(c);
    } else {
      tail = absl::StrCat("data: ", openai::ErrorBody(openai::ErrorFromStatus(status)), "\n\n");
    }
    tail += "data: [DONE]\n\n";
    if (sink.write(tail.data(), tail.size())) sink.done();
  }

  // A one-off session leaves nothing behind (best effort: a failure is logged).
  void EndOneOff(const openai::ParsedRequest& parsed, const std::string& authorization) {
    if (!parsed.one_off) return;
    grpc::ClientContext ctx;
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::EndSessionRequest req;
    req.set_session_id(parsed.generate.session_id());
    v1::EndSessionResponse resp;
    const grpc::Status st = stub_->EndSession(&ctx, req, &resp);
    if (!st.ok() && st.error_code() != grpc::StatusCode::NOT_FOUND) {
      log::Warning("ending a one-off OpenAI session failed",
                   {{"session", parsed.generate.session_id()}, {"error", st.error_message()}});
    }
  }

  const OpenAiServerOptions options_;
  const std::unique_ptr<v1::Frontend::Stub> stub_;
  metrics::MetricsRegistry& registry_;
  const absl::Time started_ = absl::Now();
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

absl::StatusOr<std::unique_ptr<httplib::Server>> MakeHttp(const OpenAiServerOptions& o) {
  std::unique_ptr<httplib::Server> http;
  if (o.tls.cert_file.empty()) {
    http = std::make_unique<httplib::Server>();
  } else {
    auto tls = std::make_unique<httplib::SSLServer>(
        o.tls.cert_file.c_str(), o.tls.key_file.c_str(),
        o.tls.ca_file.empty() ? nullptr : o.tls.ca_file.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the OpenAI API cannot use the certificate %s / key %s%s", o.tls.cert_file,
          o.tls.key_file, o.tls.ca_file.empty() ? "" : " / client CA " + o.tls.ca_file));
    }
    http = std::move(tls);
  }
  const size_t threads = static_cast<size_t>(o.threads);
  http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http->set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
  NoPortSharing(*http);
  const auto timeout = absl::ToChronoSeconds(o.io_timeout);
  http->set_read_timeout(timeout);
  http->set_write_timeout(timeout);
  return http;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(
    const OpenAiServerOptions& options, std::shared_ptr<grpc::Channel> frontend,
    metrics::MetricsRegistry& registry) {
  if (options.threads < 1 || options.max_body_bytes < 1) {
    return absl::InvalidArgumentError("the OpenAI API needs threads >= 1 and max_body_bytes >= 1");
  }
  absl::StatusOr<std::unique_ptr<httplib::Server>> http = MakeHttp(options);
  if (!http.ok()) return http.status();
  auto server = std::make_unique<Server>(options, std::move(frontend), registry, *std::move(http));
  RETURN_IF_ERROR(server->Listen());
  return server;
}

}  // namespace glimpse::frontend
