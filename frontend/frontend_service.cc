// FrontendService: construction, what every method shares (authentication, coordinator calls and
// their errors, worker channels) and the unary methods. Generate is in frontend_generate.cc.
#include "frontend/frontend_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "proto/limits.h"

namespace glimpse::frontend {
namespace {

std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// The one message for a session the caller cannot see, whether it never existed or is another
// tenant's: nothing distinguishes the two.
absl::Status SessionNotFound(const std::string& session_id) {
  return absl::NotFoundError(absl::StrFormat("session \"%s\" not found", session_id));
}

absl::StatusOr<TurnLimits> MakeLimits(const FrontendOptions& o, const model::Model& model) {
  TurnLimits limits;
  limits.vocab_size = std::min(model.config().vocab_size, model.tokenizer().vocab_size());
  limits.context_length = model.config().context_length;
  limits.max_prompt_tokens =
      o.max_prompt_tokens > 0 ? o.max_prompt_tokens : limits.context_length - 1;
  if (limits.max_prompt_tokens > limits.context_length - 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("limits.max_prompt_tokens %d exceeds the model's context %d - 1",
                        o.max_prompt_tokens, limits.context_length));
  }
  if (o.default_max_tokens < 1 || o.default_max_tokens > o.max_output_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("limits.default_max_tokens %d must be in [1, limits.max_output_tokens %d]",
                        o.default_max_tokens, o.max_output_tokens));
  }
  limits.default_max_tokens = o.default_max_tokens;
  limits.max_output_tokens = o.max_output_tokens;
  limits.max_tool_hint = o.max_tool_hint;
  absl::StatusOr<v1::EvictionPolicy> policy = ResolvePolicy(o.default_policy, "fp16");
  if (!policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("default policy (policy.*): ", policy.status().message()));
  }
  limits.default_policy = *policy;
  return limits;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FrontendService>> FrontendService::Create(
    const FrontendOptions& options, const model::Model* model, std::unique_ptr<Authenticator> auth,
    std::string salt_secret, FrontendMetrics* metrics) {
  if (salt_secret.size() < 16) {
    return absl::InvalidArgumentError("the salt secret is shorter than 16 bytes");
  }
  ASSIGN_OR_RETURN(TurnLimits limits, MakeLimits(options, *model));
  ASSIGN_OR_RETURN(kvstate::Fingerprint fingerprint,
                   kvstate::FingerprintFromHex(model->fingerprint()));
  ASSIGN_OR_RETURN(
      std::unique_ptr<cluster::Coordinators> coordinators,
      cluster::Coordinators::Connect(options.coordinator_addresses, options.client_tls));
  return std::unique_ptr<FrontendService>(
      new FrontendService(options, model, std::move(auth), std::move(salt_secret), metrics,
                          fingerprint, std::move(limits), std::move(coordinators)));
}

FrontendService::FrontendService(const FrontendOptions& options, const model::Model* model,
                                 std::unique_ptr<Authenticator> auth, std::string salt_secret,
                                 FrontendMetrics* metrics, kvstate::Fingerprint fingerprint,
                                 TurnLimits limits,
                                 std::unique_ptr<cluster::Coordinators> coordinators)
    : options_(options),
      model_(model),
      auth_(std::move(auth)),
      salt_secret_(std::move(salt_secret)),
      metrics_(metrics),
      fingerprint_(fingerprint),
      limits_(std::move(limits)),
      coordinator_(std::move(coordinators)),
      calls_(options.max_calls_per_tenant) {}

absl::StatusOr<std::string> FrontendService::Authenticate(const Caller& caller) const {
  return auth_->Authenticate(caller.Authorization());
}

std::unique_ptr<grpc::ClientContext> FrontendService::CoordinatorContext(
    const Caller* caller, absl::Duration extra) const {
  std::unique_ptr<grpc::ClientContext> out =
      caller != nullptr ? caller->Propagate() : std::make_unique<grpc::ClientContext>();
  out->set_deadline(DeadlineIn(options_.coordinator_timeout + extra));
  return out;
}

absl::Status FrontendService::CoordinatorError(std::string_view rpc, const grpc::Status& status,
                                               const std::string& scoped_id,
                                               const std::string& session_id) const {
  // Messages name the caller's own session id, never the scoped one.
  std::string message = absl::StrReplaceAll(status.error_message(), {{scoped_id, session_id}});
  message = absl::StrFormat("coordinator %s %s: %s", coordinator_->addresses(), rpc, message);
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNAVAILABLE:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
    default:  // the coordinator misbehaving or refusing us is not the caller's fault
      return absl::UnavailableError(message);
  }
}

absl::StatusOr<std::optional<v1::SessionInfo>> FrontendService::FindSession(
    const Caller& caller, const std::string& tenant, const std::string& session_id) const {
  const std::string scoped = ScopedSessionId(tenant, session_id);
  v1::GetSessionRequest req;
  req.set_session_id(scoped);
  v1::GetSessionResponse resp;
  grpc::Status st =
      coordinator_->Call([&] { return CoordinatorContext(&caller); },
                         [&](auto& stub, auto* ctx) { return stub.GetSession(ctx, req, &resp); });
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) return std::nullopt;
  if (!st.ok()) return CoordinatorError("GetSession", st, scoped, session_id);
  if (resp.session().tenant() != tenant) {  // scoped ids make this a foreign writer's record
    log::Warning("session of another tenant",
                 {{"tenant", tenant}, {"session", scoped}, {"owner", resp.session().tenant()}});
    return SessionNotFound(session_id);
  }
  v1::SessionInfo info = resp.session();
  info.set_session_id(session_id);
  return info;
}

absl::StatusOr<v1::SessionInfo> FrontendService::OwnSession(const Caller& caller,
                                                            const std::string& tenant,
                                                            const std::string& session_id) const {
  ASSIGN_OR_RETURN(std::optional<v1::SessionInfo> info, FindSession(caller, tenant, session_id));
  if (!info.has_value()) return SessionNotFound(session_id);
  return *std::move(info);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> FrontendService::WorkerChannel(
    const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   ClientChannel(address, options_.client_tls));
  channels_[address] = channel;
  return channel;
}

// Best effort: the coordinator also tells the worker at its next heartbeat.
void FrontendService::ReleaseOnWorker(const std::string& worker_id, const std::string& scoped_id) {
  v1::ListNodesRequest list;
  list.set_role(v1::NODE_ROLE_DECODE);
  v1::ListNodesResponse nodes;
  grpc::Status st =
      coordinator_->Call([&] { return CoordinatorContext(nullptr); },
                         [&](auto& stub, auto* ctx) { return stub.ListNodes(ctx, list, &nodes); });
  std::string address;
  for (const v1::NodeInfo& node : nodes.nodes()) {
    if (node.node_id() == worker_id) address = node.grpc_address();
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      address.empty() ? absl::NotFoundError("not a live decode worker") : WorkerChannel(address);
  if (st.ok() && channel.ok()) {
    v1::ReleaseSessionRequest req;
    req.set_session_id(scoped_id);
    v1::ReleaseSessionResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(options_.coordinator_timeout));
    st = v1::DecodeWorker::NewStub(*channel)->ReleaseSession(&ctx, req, &resp);
  }
  const std::string error = !st.ok() ? st.error_message() : channel.status().ToString();
  if (st.ok() && channel.ok()) {
    log::Info("session released on its worker", {{"session", scoped_id}, {"worker", worker_id}});
  } else {
    log::Warning("could not release the session on its worker",
                 {{"session", scoped_id}, {"worker", worker_id}, {"error", error}});
  }
}

absl::Status FrontendService::GetSession(const Caller& caller, const v1::GetSessionRequest& req,
                                         v1::GetSessionResponse* resp) {
  ASSIGN_OR_RETURN(std::string tenant, Authenticate(caller));
  RETURN_IF_ERROR(v1::CheckId("session_id", req.session_id()));
  ASSIGN_OR_RETURN(*resp->mutable_session(), OwnSession(caller, tenant, req.session_id()));
  return absl::OkStatus();
}

absl::Status FrontendService::EndSession(const Caller& caller, const v1::EndSessionRequest& req,
                                         v1::EndSessionResponse* resp) {
  ASSIGN_OR_RETURN(std::string tenant, Authenticate(caller));
  RETURN_IF_ERROR(v1::CheckId("session_id", req.session_id()));
  ASSIGN_OR_RETURN(v1::SessionInfo info, OwnSession(caller, tenant, req.session_id()));
  const std::string scoped = ScopedSessionId(tenant, req.session_id());
  v1::EndSessionRequest down;
  down.set_session_id(scoped);
  grpc::Status st =
      coordinator_->Call([&] { return CoordinatorContext(&caller); },
                         [&](auto& stub, auto* ctx) { return stub.EndSession(ctx, down, resp); });
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) return SessionNotFound(req.session_id());
  if (!st.ok()) return CoordinatorError("EndSession", st, scoped, req.session_id());
  if (!info.decode_worker_id().empty()) ReleaseOnWorker(info.decode_worker_id(), scoped);
  return absl::OkStatus();
}

absl::Status FrontendService::ToolCallEnded(const Caller& caller,
                                            const v1::ToolCallEndedFrontendRequest& req,
                                            v1::ToolCallEndedResponse* resp) {
  ASSIGN_OR_RETURN(std::string tenant, Authenticate(caller));
  RETURN_IF_ERROR(v1::CheckId("session_id", req.session_id()));
  RETURN_IF_ERROR(ValidateDurationMs("observed_duration_ms", req.observed_duration_ms(),
                                     limits_.max_tool_hint));
  RETURN_IF_ERROR(OwnSession(caller, tenant, req.session_id()).status());
  const std::string scoped = ScopedSessionId(tenant, req.session_id());
  v1::ToolCallEndedRequest down;
  down.set_session_id(scoped);
  down.set_observed_duration_ms(req.observed_duration_ms());
  grpc::Status st = coordinator_->Call(
      [&] { return CoordinatorContext(&caller); },
      [&](auto& stub, auto* ctx) { return stub.ToolCallEnded(ctx, down, resp); });
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) return SessionNotFound(req.session_id());
  if (!st.ok()) return CoordinatorError("ToolCallEnded", st, scoped, req.session_id());
  return absl::OkStatus();
}

}  // namespace glimpse::frontend
