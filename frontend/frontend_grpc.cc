#include "frontend/frontend_grpc.h"

#include <chrono>

#include "absl/time/clock.h"
#include "core/common/grpc/status.h"

namespace glimpse::frontend {
namespace {

class GrpcCaller final : public Caller {
 public:
  explicit GrpcCaller(const grpc::ServerContext* ctx) : ctx_(ctx) {}

  std::optional<std::string_view> Authorization() const override {
    const auto& metadata = ctx_->client_metadata();
    auto it = metadata.find("authorization");
    if (it == metadata.end()) return std::nullopt;
    return std::string_view(it->second.data(), it->second.size());
  }
  std::unique_ptr<grpc::ClientContext> Propagate() const override {
    return grpc::ClientContext::FromServerContext(*ctx_);
  }
  bool IsCancelled() const override { return ctx_->IsCancelled(); }
  bool DeadlinePassed() const override {
    return std::chrono::system_clock::now() >= ctx_->deadline();
  }

 private:
  const grpc::ServerContext* const ctx_;
};

}  // namespace

grpc::Status FrontendGrpc::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                    grpc::ServerWriter<v1::GenerateEvent>* writer) {
  metrics_->in_flight().Add(1);
  absl::Status st = service_->Generate(
      GrpcCaller(ctx), *req, [writer](const v1::GenerateEvent& e) { return writer->Write(e); });
  metrics_->in_flight().Add(-1);
  metrics_->Request("Generate", st.code());
  return ToGrpcStatus(st);
}

grpc::Status FrontendGrpc::GetSession(grpc::ServerContext* ctx, const v1::GetSessionRequest* req,
                                      v1::GetSessionResponse* resp) {
  absl::Status st = service_->GetSession(GrpcCaller(ctx), *req, resp);
  metrics_->Request("GetSession", st.code());
  return ToGrpcStatus(st);
}

grpc::Status FrontendGrpc::EndSession(grpc::ServerContext* ctx, const v1::EndSessionRequest* req,
                                      v1::EndSessionResponse* resp) {
  absl::Status st = service_->EndSession(GrpcCaller(ctx), *req, resp);
  metrics_->Request("EndSession", st.code());
  return ToGrpcStatus(st);
}

grpc::Status FrontendGrpc::ToolCallEnded(grpc::ServerContext* ctx,
                                         const v1::ToolCallEndedFrontendRequest* req,
                                         v1::ToolCallEndedResponse* resp) {
  absl::Status st = service_->ToolCallEnded(GrpcCaller(ctx), *req, resp);
  metrics_->Request("ToolCallEnded", st.code());
  return ToGrpcStatus(st);
}

}  // namespace glimpse::frontend
