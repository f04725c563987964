// CoordinatorGrpc: the gRPC face of CoordinatorService (proto/glimpse/v1/coordinator.proto).
// Converts proto <-> domain types and absl::Status -> grpc::Status; no policy lives here.
// Durations cross the wire as integer milliseconds; a 0 hint means "none", a negative one is
// passed through so the service rejects it with INVALID_ARGUMENT. RouteTurn's admission wait is
// bounded by the call's gRPC deadline too. Authorized calls reach the service the source names;
// where it names none they are refused with its status. Thread-safe (the service is).
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_service.h"
#include "glimpse/v1/coordinator.grpc.pb.h"

namespace glimpse::coordinator {

class CoordinatorGrpc final : public glimpse::v1::Coordinator::Service {
 public:
  // Where each call goes: the leading coordinator's service, or why none (leadership.h).
  using ServiceSource = std::function<absl::StatusOr<std::shared_ptr<CoordinatorService>>()>;
  explicit CoordinatorGrpc(ServiceSource source) : source_(std::move(source)) {}
  // Always `service` (not owned): one coordinator, as in tests.
  explicit CoordinatorGrpc(CoordinatorService* service)
      : source_([service] {
          return std::shared_ptr<CoordinatorService>(std::shared_ptr<void>(), service);
        }) {}

  grpc::Status RegisterNode(grpc::ServerContext* ctx, const v1::RegisterNodeRequest* req,
                            v1::RegisterNodeResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status Deregister(grpc::ServerContext* ctx, const v1::DeregisterRequest* req,
                          v1::DeregisterResponse* resp) override;
  grpc::Status RouteTurn(grpc::ServerContext* ctx, const v1::RouteTurnRequest* req,
                         v1::RouteTurnResponse* resp) override;
  grpc::Status EndTurn(grpc::ServerContext* ctx, const v1::EndTurnRequest* req,
                       v1::EndTurnResponse* resp) override;
  grpc::Status ToolCallEnded(grpc::ServerContext* ctx, const v1::ToolCallEndedRequest* req,
                             v1::ToolCallEndedResponse* resp) override;
  grpc::Status EndSession(grpc::ServerContext* ctx, const v1::EndSessionRequest* req,
                          v1::EndSessionResponse* resp) override;
  grpc::Status GetSession(grpc::ServerContext* ctx, const v1::GetSessionRequest* req,
                          v1::GetSessionResponse* resp) override;
  grpc::Status ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest* req,
                         v1::ListNodesResponse* resp) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const v1::StatsRequest* req,
                     v1::StatsResponse* resp) override;

 private:
  // The source's answer; a refusal naming the leader names it to the caller too.
  absl::StatusOr<std::shared_ptr<CoordinatorService>> Service(grpc::ServerContext& ctx) const;

  const ServiceSource source_;
};

}  // namespace glimpse::coordinator
