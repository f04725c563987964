// FrontendGrpc: the gRPC face of FrontendService (proto/glimpse/v1/frontend.proto). Makes the
// service's Caller from the gRPC call (its "authorization" metadata; downstream calls propagate
// its deadline and cancellation), streams Generate's events to the caller, counts requests on
// /metrics and converts absl::Status to grpc::Status; no policy lives here. Thread-safe (the
// service is).
#pragma once

#include "frontend/frontend_metrics.h"
#include "frontend/frontend_service.h"
#include "glimpse/v1/frontend.grpc.pb.h"

namespace glimpse::frontend {

class FrontendGrpc final : public v1::Frontend::Service {
 public:
  // Neither is owned; both must outlive this.
  FrontendGrpc(FrontendService* service, FrontendMetrics* metrics)
      : service_(service), metrics_(metrics) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateEvent>* writer) override;
  grpc::Status ToolCallEnded(grpc::ServerContext* ctx, const v1::ToolCallEndedFrontendRequest* req,
                             v1::ToolCallEndedResponse* resp) override;
  grpc::Status EndSession(grpc::ServerContext* ctx, const v1::EndSessionRequest* req,
                          v1::EndSessionResponse* resp) override;
  grpc::Status GetSession(grpc::ServerContext* ctx, const v1::GetSessionRequest* req,
                          v1::GetSessionResponse* resp) override;

 private:
  FrontendService* const service_;
  FrontendMetrics* const metrics_;
};

}  // namespace glimpse::frontend
