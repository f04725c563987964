// FrontendService::Generate: one turn, authenticate → resolve → route → decode → end turn.
#include <algorithm>
#include <limits>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "core/common/grpc/status.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "frontend/frontend_service.h"

namespace glimpse::frontend {

struct FrontendService::Call {
  Call(const Caller& c, const EventSink& s, const v1::GenerateRequest& r)
      : caller(c), send(s), req(r), received(absl::Now()) {}

  const Caller& caller;
  const EventSink& send;
  const v1::GenerateRequest& req;
  absl::Time received;
  std::string tenant;
  std::string scoped;  // ScopedSessionId(tenant, req.session_id())
  Turn turn;
  kvstate::NamespaceKey ns{};
  int64_t history_tokens = 0;     // KV tokens the session holds (after eviction)
  int64_t summarised_tokens = 0;  // conversation tokens its state summarises
  v1::RouteTurnResponse route;
  bool first_token_sent = false;
  v1::TurnStarted started;   // as the decode worker reported it
  uint64_t delivery_id = 0;  // nonzero when a prefill worker shipped this turn's state
  v1::PrefillResponse prefill;
  std::unique_ptr<grpc::ClientContext> worker_ctx;
};

namespace {

std::string WorkerName(const v1::RouteTurnResponse& route) {
  return absl::StrFormat("%s at %s", route.decode_worker_id(), route.decode_grpc_address());
}

}  // namespace

absl::Status FrontendService::Generate(const Caller& caller, const v1::GenerateRequest& req,
                                       const EventSink& send) {
  Call call(caller, send, req);
  ASSIGN_OR_RETURN(call.tenant, Authenticate(caller));
  ASSIGN_OR_RETURN(const TenantCalls::Slot slot, calls_.Enter(call.tenant));
  ASSIGN_OR_RETURN(call.turn, ResolveTurn(req, model_->tokenizer(), limits_));
  call.scoped = ScopedSessionId(call.tenant, req.session_id());
  call.ns = kvstate::MakeNamespaceKey(TenantSalt(salt_secret_, call.tenant), fingerprint_,
                                      call.turn.policy_string);
  ASSIGN_OR_RETURN(std::optional<v1::SessionInfo> session,
                   FindSession(caller, call.tenant, req.session_id()));
  const int64_t n = static_cast<int64_t>(call.turn.tokens.size());
  if (session.has_value()) {
    call.history_tokens = std::min(session->kv_tokens(), n - 1);
    // Eviction keeps fewer tokens than the state summarises: new tokens count from the latter.
    const int64_t summarised = std::max(session->summarised_tokens(), session->kv_tokens());
    call.summarised_tokens = std::min(summarised, n - 1);
  }
  RETURN_IF_ERROR(Route(call));
  if (!call.route.prefill_on_decode()) PrefillOnWorker(call);
  absl::StatusOr<v1::TurnDone> done = RunOnWorker(call);
  if (!done.ok()) {
    AbandonTurn(call);
    return done.status();
  }
  return FinishTurn(call, *done);
}

absl::Status FrontendService::Route(Call& call) {
  v1::RouteTurnRequest req;
  req.set_session_id(call.scoped);
  req.set_tenant(call.tenant);
  req.set_history_tokens(call.history_tokens);
  req.set_new_tokens(static_cast<int64_t>(call.turn.tokens.size()) - call.summarised_tokens);
  req.set_max_output_tokens(call.turn.sampling.max_tokens());
  // tool_name stays empty: the tool whose result this turn carries is the one named at the last
  // EndTurn (the request's tool_name is the pause after this turn).
  req.set_max_queue_wait_ms(absl::ToInt64Milliseconds(options_.max_queue_wait));
  grpc::Status st = coordinator_->Call(
      [&] { return CoordinatorContext(&call.caller, options_.max_queue_wait); },
      [&](auto& stub, auto* ctx) { return stub.RouteTurn(ctx, req, &call.route); });
  if (!st.ok()) return CoordinatorError("RouteTurn", st, call.scoped, call.req.session_id());
  return absl::OkStatus();
}

// The coordinator chose a prefill worker: it prefills all but the last token and ships the kept KV
// to the decode worker under a fresh delivery id. A prefill that fails is logged and counted, and
// the decode worker prefills the turn itself (slower, not wrong).
void FrontendService::PrefillOnWorker(Call& call) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      WorkerChannel(call.route.prefill_grpc_address());
  v1::PrefillRequest req;
  req.set_session_id(call.scoped);
  req.set_namespace_key(call.ns.data(), call.ns.size());
  req.mutable_tokens()->Assign(call.turn.tokens.begin(), call.turn.tokens.end());
  *req.mutable_policy() = call.turn.policy;
  req.set_decode_ucx_address(call.route.decode_ucx_address());
  // The decode worker holds the session's state of the last turn: a delta against it suffices.
  if (call.route.hot_hit()) req.set_hot_tokens(static_cast<int32_t>(call.summarised_tokens));
  thread_local absl::BitGen bitgen;  // ids only need to be unlikely to collide
  req.set_delivery_id(absl::Uniform<uint64_t>(bitgen, 1, std::numeric_limits<uint64_t>::max()));
  grpc::Status st = channel.ok() ? grpc::Status::OK : ToGrpcStatus(channel.status());
  if (st.ok()) {
    // Propagated: the caller's deadline and cancellation reach the prefill worker.
    std::unique_ptr<grpc::ClientContext> ctx = call.caller.Propagate();
    st = v1::PrefillWorker::NewStub(*channel)->Prefill(ctx.get(), req, &call.prefill);
  }
  if (!st.ok()) {
    metrics_->PrefillFailure();
    log::Warning("prefill worker failed; the decode worker prefills the turn",
                 {{"worker", call.route.prefill_worker_id()},
                  {"session", call.scoped},
                  {"error", st.error_message()}});
    return;
  }
  call.delivery_id = req.delivery_id();
}

absl::StatusOr<v1::TurnDone> FrontendService::RunOnWorker(Call& call) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      WorkerChannel(call.route.decode_grpc_address());
  if (!channel.ok()) return WorkerFailure(call, ToGrpcStatus(channel.status()));
  v1::DecodeTurnRequest req;
  req.set_session_id(call.scoped);
  req.set_namespace_key(call.ns.data(), call.ns.size());
  req.mutable_tokens()->Assign(call.turn.tokens.begin(), call.turn.tokens.end());
  *req.mutable_sampling() = call.turn.sampling;
  *req.mutable_policy() = call.turn.policy;
  req.set_delivery_id(call.delivery_id);
  // Propagated: the caller's deadline and cancellation reach the worker.
  call.worker_ctx = call.caller.Propagate();
  std::unique_ptr<v1::DecodeWorker::Stub> stub = v1::DecodeWorker::NewStub(*channel);
  std::unique_ptr<grpc::ClientReader<v1::DecodeEvent>> reader =
      stub->DecodeTurn(call.worker_ctx.get(), req);
  v1::DecodeEvent event;
  std::optional<v1::TurnDone> done;
  absl::Status forwarded;
  while (reader->Read(&event)) {
    if (!forwarded.ok()) continue;  // cancelled below: drain what is already in flight
    forwarded = ForwardEvent(call, event);
    if (!forwarded.ok()) call.worker_ctx->TryCancel();
    if (event.has_done()) done = event.done();
  }
  // A stream that ended before TurnDone without a status yet (an event that did not parse) would
  // leave Finish waiting for events nobody reads: end it. A status already received stands.
  if (!done.has_value()) call.worker_ctx->TryCancel();
  grpc::Status finish = reader->Finish();
  // A turn that reached TurnDone is ended with its KV even when the caller left meanwhile.
  if (done.has_value()) {
    if (!finish.ok()) {
      log::Warning("decode worker failed after TurnDone",
                   {{"worker", WorkerName(call.route)}, {"error", finish.error_message()}});
    }
    return *done;
  }
  if (!forwarded.ok()) return forwarded;
  if (finish.ok()) {
    finish = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream ended without TurnDone");
  }
  return WorkerFailure(call, finish);
}

absl::Status FrontendService::ForwardEvent(Call& call, const v1::DecodeEvent& event) {
  v1::GenerateEvent out;
  if (event.has_started()) {
    *out.mutable_started() = event.started();
    out.set_decode_worker_id(call.route.decode_worker_id());
    out.set_queue_wait_ms(call.route.queue_wait_ms());
    out.set_prompt_tokens(static_cast<int32_t>(call.turn.tokens.size()));
    if (event.started().source() == v1::STATE_SOURCE_PREFILL_WORKER) {
      out.set_prefill_worker_id(call.route.prefill_worker_id());
      *out.mutable_prefill() = call.prefill;
      // The turn's recall happened on the prefill worker: one place for clients to read it.
      v1::TurnStarted& started = *out.mutable_started();
      started.set_recall_candidates(started.recall_candidates() + call.prefill.recall_candidates());
      started.set_recalled_entries(started.recalled_entries() + call.prefill.recalled_entries());
    }
    call.started = out.started();
    metrics_->TurnStarted(out.started());
  } else if (event.has_tokens()) {
    *out.mutable_tokens() = event.tokens();
    metrics_->Streamed(event.tokens());
    if (!call.first_token_sent && event.tokens().token_ids_size() > 0) {
      call.first_token_sent = true;
      metrics_->FirstToken(absl::ToDoubleSeconds(absl::Now() - call.received));
    }
  } else if (event.has_done()) {
    *out.mutable_done() = event.done();
  } else {
    return absl::OkStatus();  // an event this frontend does not know: not forwarded
  }
  if (!call.send(out)) {
    return absl::CancelledError("the caller went away; the turn was cancelled");
  }
  return absl::OkStatus();
}

absl::Status FrontendService::WorkerFailure(Call& call, const grpc::Status& status) {
  if (call.caller.IsCancelled()) {
    if (call.caller.DeadlinePassed()) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "the deadline passed during the turn on decode worker %s", WorkerName(call.route)));
    }
    return absl::CancelledError("the caller cancelled the turn");
  }
  metrics_->WorkerFailure();
  const absl::Status cause = FromGrpcStatus(status);
  log::Error(
      "decode worker failed mid-turn",
      {{"worker", WorkerName(call.route)}, {"session", call.scoped}, {"error", cause.ToString()}});
  if (cause.code() == absl::StatusCode::kInvalidArgument) {
    return absl::InvalidArgumentError(absl::StrFormat("decode worker %s rejected the turn: %s",
                                                      WorkerName(call.route), cause.message()));
  }
  return absl::UnavailableError(absl::StrFormat("decode worker %s failed mid-turn: %s",
                                                WorkerName(call.route), cause.ToString()));
}

// The turn failed: end it as failed, so its reservation is released, no lease is set and the
// next turn reloads from a cache node. Not bound by the caller's deadline, which may have passed.
void FrontendService::AbandonTurn(Call& call) {
  v1::EndTurnRequest req;
  req.set_session_id(call.scoped);
  req.set_kv_tokens(0);
  req.set_turn_failed(true);
  req.set_turn_index(call.route.turn_index());  // a newer turn of the session is left running
  v1::EndTurnResponse resp;
  grpc::Status st =
      coordinator_->Call([&] { return CoordinatorContext(nullptr); },
                         [&](auto& stub, auto* ctx) { return stub.EndTurn(ctx, req, &resp); });
  if (!st.ok()) {
    log::Warning("could not end the failed turn",
                 {{"session", call.scoped}, {"error", st.error_message()}});
  }
}

absl::Status FrontendService::FinishTurn(Call& call, const v1::TurnDone& done) {
  metrics_->TurnDone(done, absl::ToDoubleSeconds(absl::Now() - call.received));
  v1::EndTurnRequest req;
  req.set_session_id(call.scoped);
  req.set_kv_tokens(done.hot_tokens());
  req.set_summarised_tokens(std::max(done.kv_tokens(), done.hot_tokens()));
  req.set_turn_index(call.route.turn_index());
  req.set_tool_name(call.req.tool_name());
  req.set_expected_duration_ms(call.req.expected_tool_ms());
  if (call.started.source() == v1::STATE_SOURCE_WARM) {
    // What not being hot cost this turn: the coordinator's lease estimator learns R(n) from it.
    req.set_reload_seconds(call.started.load_seconds());
    req.set_reload_tokens(call.started.reused_tokens());
  }
  v1::EndTurnResponse resp;
  // Not bound by the caller's deadline: the turn ran, its KV must get a lease or be released.
  grpc::Status st =
      coordinator_->Call([&] { return CoordinatorContext(nullptr); },
                         [&](auto& stub, auto* ctx) { return stub.EndTurn(ctx, req, &resp); });
  if (!st.ok()) return CoordinatorError("EndTurn", st, call.scoped, call.req.session_id());
  v1::GenerateEvent event;
  v1::TurnLease* lease = event.mutable_lease();
  lease->set_ttl_ms(resp.ttl_ms());
  lease->set_ttl_source(resp.ttl_source());
  lease->set_reuse_probability(resp.reuse_probability());
  log::Info("turn done", {{"session", call.scoped},
                          {"worker", call.route.decode_worker_id()},
                          {"generated", static_cast<long long>(done.generated_tokens())},
                          {"kv_tokens", static_cast<long long>(done.hot_tokens())},
                          {"ttl_ms", static_cast<long long>(resp.ttl_ms())}});
  if (!call.send(event)) return absl::CancelledError("the caller went away");
  return absl::OkStatus();
}

}  // namespace glimpse::frontend
