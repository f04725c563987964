#include "coordinator/coordinator_grpc.h"

#include <chrono>
#include <cmath>

#include "core/cluster/coordinators.h"
#include "core/cluster/node_role.h"
#include "core/common/grpc/identity.h"
#include "core/common/grpc/status.h"

namespace glimpse::coordinator {
namespace {

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }
int64_t UnixMs(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t); }

void ToProto(const NodeLoad& l, v1::NodeLoad* p) {
  p->set_queue_length(l.queue_length);
  p->set_used_bytes(l.used_bytes);
  p->set_hot_sessions(l.hot_sessions);
}

v1::SessionTier TierToProto(SessionTier t) {
  switch (t) {
    case SessionTier::kActive:
      return v1::SESSION_TIER_ACTIVE;
    case SessionTier::kLeased:
      return v1::SESSION_TIER_LEASED;
    case SessionTier::kWarm:
      return v1::SESSION_TIER_WARM;
  }
  return v1::SESSION_TIER_UNSPECIFIED;
}

// A negative hint stays negative (the service rejects it); 0 is "none".
std::optional<absl::Duration> Hint(int64_t ms) {
  if (ms == 0) return std::nullopt;
  return absl::Milliseconds(ms);
}

}  // namespace

absl::StatusOr<std::shared_ptr<CoordinatorService>> CoordinatorGrpc::Service(
    grpc::ServerContext& ctx) const {
  absl::StatusOr<std::shared_ptr<CoordinatorService>> service = source_();
  if (!service.ok()) {
    if (auto leader = service.status().GetPayload(kLeaderPayload); leader.has_value()) {
      ctx.AddTrailingMetadata(cluster::kLeaderMetadata, std::string(*leader));
    }
  }
  return service;
}

grpc::Status CoordinatorGrpc::RegisterNode(grpc::ServerContext* ctx,
                                           const v1::RegisterNodeRequest* req,
                                           v1::RegisterNodeResponse* resp) {
  GRPC_RETURN_IF_ERROR(
      AuthorizeNode(*ctx, "RegisterNode", {cluster::NodeRoleName(req->role())}, req->node_id()));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  NodeSpec spec{req->node_id(),
                static_cast<NodeRole>(req->role()),
                req->grpc_address(),
                req->ucx_address(),
                req->capacity_bytes(),
                req->incarnation(),
                {req->client_ucx_addresses().begin(), req->client_ucx_addresses().end()}};
  absl::StatusOr<CoordinatorService::Registered> again = service->RegisterNode(spec);
  if (!again.ok()) return ToGrpcStatus(again.status());
  resp->set_heartbeat_interval_ms(Ms(service->options().membership.heartbeat_interval));
  resp->set_missed_heartbeats(service->options().membership.missed_heartbeats);
  resp->set_reregistered(again->reregistered);
  resp->set_demoted_sessions(again->demoted);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                        v1::HeartbeatResponse* resp) {
  GRPC_RETURN_IF_ERROR(AuthorizeNode(
      *ctx, "Heartbeat", {roles::kDecode, roles::kPrefill, roles::kCache}, req->node_id()));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  NodeLoad load{req->load().queue_length(), req->load().used_bytes(), req->load().hot_sessions()};
  absl::StatusOr<std::vector<std::string>> released = service->Heartbeat(req->node_id(), load);
  if (!released.ok()) return ToGrpcStatus(released.status());
  for (const std::string& s : *released) resp->add_release_sessions(s);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::Deregister(grpc::ServerContext* ctx, const v1::DeregisterRequest* req,
                                         v1::DeregisterResponse* resp) {
  GRPC_RETURN_IF_ERROR(AuthorizeNode(
      *ctx, "Deregister", {roles::kDecode, roles::kPrefill, roles::kCache}, req->node_id()));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  absl::StatusOr<int> demoted = service->Deregister(req->node_id());
  if (!demoted.ok()) return ToGrpcStatus(demoted.status());
  resp->set_demoted_sessions(*demoted);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::RouteTurn(grpc::ServerContext* ctx, const v1::RouteTurnRequest* req,
                                        v1::RouteTurnResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "RouteTurn", {roles::kFrontend}));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  RouteRequest r;
  r.session = req->session_id();
  r.tenant = req->tenant();
  r.history_tokens = req->history_tokens();
  r.new_tokens = req->new_tokens();
  r.max_output_tokens = req->max_output_tokens();
  r.tool = req->tool_name();
  r.max_wait = absl::Milliseconds(req->max_queue_wait_ms());
  if (r.max_wait >= absl::ZeroDuration()) {
    // Never wait past the caller's deadline (leave 10 ms to answer).
    absl::Duration left = absl::FromChrono(ctx->deadline() - std::chrono::system_clock::now()) -
                          absl::Milliseconds(10);
    if (r.max_wait == absl::ZeroDuration()) r.max_wait = service->options().admission_default_wait;
    if (left < r.max_wait) {
      r.max_wait = std::max(left, absl::ZeroDuration());
      r.no_wait = r.max_wait == absl::ZeroDuration();
    }
  }
  absl::StatusOr<RouteResult> out = service->RouteTurn(r);
  if (!out.ok()) return ToGrpcStatus(out.status());
  resp->set_decode_worker_id(out->decode.id);
  resp->set_decode_grpc_address(out->decode.grpc_address);
  resp->set_decode_ucx_address(out->decode.ucx_address);
  resp->set_hot_hit(out->hot_hit);
  resp->set_prefill_on_decode(out->prefill_on_decode);
  if (!out->prefill_on_decode) {
    resp->set_prefill_worker_id(out->prefill.id);
    resp->set_prefill_grpc_address(out->prefill.grpc_address);
    resp->set_prefill_ucx_address(out->prefill.ucx_address);
  }
  resp->set_reserved_bytes(out->reserved_bytes);
  resp->set_queue_wait_ms(Ms(out->queue_wait));
  resp->set_turn_index(out->turn_index);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::EndTurn(grpc::ServerContext* ctx, const v1::EndTurnRequest* req,
                                      v1::EndTurnResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "EndTurn", {roles::kFrontend}));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  EndTurnRequest r{req->session_id(), req->kv_tokens(), req->tool_name(),
                   Hint(req->expected_duration_ms()), std::nullopt};
  if (req->has_prefill_queue_ms()) r.prefill_wait = absl::Milliseconds(req->prefill_queue_ms());
  r.turn_failed = req->turn_failed();
  r.turn_index = req->turn_index();
  r.summarised_tokens = req->summarised_tokens();
  if (req->has_reload_seconds()) {
    // Not finite: a reload longer than any hint, refused by the service with the others.
    const double seconds = req->reload_seconds();
    r.reload = std::isfinite(seconds) ? absl::Seconds(seconds) : absl::InfiniteDuration();
    r.reload_tokens = req->reload_tokens();
  }
  absl::StatusOr<LeaseResult> l = service->EndTurn(r);
  if (!l.ok()) return ToGrpcStatus(l.status());
  resp->set_ttl_ms(Ms(l->ttl));
  resp->set_lease_expires_unix_ms(l->ttl > absl::ZeroDuration() ? UnixMs(l->expires) : 0);
  resp->set_ttl_source(l->source);
  resp->set_reuse_probability(l->reuse_probability);
  resp->set_held_bytes(l->held_bytes);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::ToolCallEnded(grpc::ServerContext* ctx,
                                            const v1::ToolCallEndedRequest* req,
                                            v1::ToolCallEndedResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "ToolCallEnded", {roles::kFrontend}));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  absl::StatusOr<ToolEndResult> t =
      service->ToolCallEnded(req->session_id(), Hint(req->observed_duration_ms()));
  if (!t.ok()) return ToGrpcStatus(t.status());
  resp->set_tool_name(t->tool);
  resp->set_recorded_duration_ms(Ms(t->recorded));
  resp->set_lease_alive(t->lease_alive);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::EndSession(grpc::ServerContext* ctx, const v1::EndSessionRequest* req,
                                         v1::EndSessionResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "EndSession", {roles::kFrontend}));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  absl::StatusOr<SessionState> before = service->GetSession(req->session_id());
  absl::StatusOr<int> turns = service->EndSession(req->session_id());
  if (!turns.ok()) return ToGrpcStatus(turns.status());
  resp->set_turns(*turns);
  resp->set_released_bytes(before.ok() ? before->reserved_bytes : 0);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::GetSession(grpc::ServerContext* ctx, const v1::GetSessionRequest* req,
                                         v1::GetSessionResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "GetSession", {roles::kFrontend, roles::kAdmin}));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  absl::StatusOr<SessionState> s = service->GetSession(req->session_id());
  if (!s.ok()) return ToGrpcStatus(s.status());
  v1::SessionInfo* p = resp->mutable_session();
  p->set_session_id(s->id);
  p->set_tenant(s->tenant);
  p->set_tier(TierToProto(s->tier));
  p->set_decode_worker_id(s->decode_worker);
  p->set_kv_tokens(s->kv_tokens);
  p->set_summarised_tokens(s->summarised_tokens);
  p->set_reserved_bytes(s->reserved_bytes);
  p->set_turns(s->turns);
  p->set_tool_name(s->tool);
  p->set_ttl_ms(Ms(s->ttl));
  p->set_lease_expires_unix_ms(s->tier == SessionTier::kLeased ? UnixMs(s->lease_expires) : 0);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest* req,
                                        v1::ListNodesResponse* resp) {
  GRPC_RETURN_IF_ERROR(
      Authorize(*ctx, "ListNodes",
                {roles::kFrontend, roles::kDecode, roles::kPrefill, roles::kCache, roles::kAdmin}));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  std::optional<NodeRole> role;
  if (req->role() != v1::NODE_ROLE_UNSPECIFIED) role = static_cast<NodeRole>(req->role());
  for (const NodeView& n : service->ListNodes(role, req->include_dead())) {
    v1::NodeInfo* p = resp->add_nodes();
    p->set_node_id(n.state.spec.id);
    p->set_role(static_cast<v1::NodeRole>(n.state.spec.role));
    p->set_grpc_address(n.state.spec.grpc_address);
    p->set_ucx_address(n.state.spec.ucx_address);
    for (const std::string& a : n.state.spec.client_ucx_addresses) p->add_client_ucx_addresses(a);
    p->set_capacity_bytes(n.state.spec.capacity_bytes);
    ToProto(n.state.load, p->mutable_load());
    p->set_alive(n.state.alive);
    p->set_last_heartbeat_unix_ms(UnixMs(n.state.last_heartbeat));
    p->set_reserved_bytes(n.reserved_bytes);
    p->set_leased_sessions(n.leased_sessions);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpc::Stats(grpc::ServerContext* ctx, const v1::StatsRequest*,
                                    v1::StatsResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Stats", {roles::kAdmin, roles::kFrontend}));
  GRPC_ASSIGN_OR_RETURN(const std::shared_ptr<CoordinatorService> service, Service(*ctx));
  CoordinatorStats s = service->Stats();
  resp->set_nodes_alive(s.nodes_alive);
  resp->set_nodes_dead(s.nodes_dead);
  resp->set_workers_announced(s.workers_announced);
  resp->set_sessions_active(s.sessions_active);
  resp->set_sessions_leased(s.sessions_leased);
  resp->set_sessions_warm(s.sessions_warm);
  resp->set_reserved_bytes(s.reserved_bytes);
  resp->set_capacity_bytes(s.capacity_bytes);
  resp->set_routes(s.routes);
  resp->set_hot_hits(s.hot_hits);
  resp->set_rejected(s.rejected);
  resp->set_demoted_expired(s.demoted_expired);
  resp->set_demoted_pressure(s.demoted_pressure);
  resp->set_demoted_dead_node(s.demoted_dead_node);
  resp->set_queue_delay_mean_ms(Ms(s.queue_delay));
  resp->set_eta(s.eta);
  resp->set_pin_cost(s.pin_cost);
  resp->set_turns_timed_out(s.turns_timed_out);
  resp->set_sessions_forgotten(s.sessions_forgotten);
  resp->set_admission_queue(s.queued);
  for (const CoordinatorStats::Tool& t : s.tools) {
    v1::ToolStats* p = resp->add_tools();
    p->set_tenant(t.tenant);
    p->set_tool_name(t.name);
    p->set_samples(t.samples);
    p->set_ttl_ms(Ms(t.ttl));
    p->set_median_ms(Ms(t.median));
  }
  return grpc::Status::OK;
}

}  // namespace glimpse::coordinator
