// FrontendService: the logic of glimpse.v1.Frontend (proto/glimpse/v1/frontend.proto), what a
// serving frontend calls; FrontendGrpc (frontend_grpc.h) is its gRPC face. Stateless: any number
// of frontend processes may serve the same coordinator.
//
// One Generate call: authenticate the tenant (auth.h) → validate and resolve the turn
// (turn_request.h: tokens, sampling, policy) → ask the coordinator where the session's KV is
// (GetSession) and where the turn goes (RouteTurn) → DecodeTurn on that decode worker, streaming
// its events to the caller (started gets the worker id and the admission wait) → EndTurn with the
// KV the worker now holds, whose lease is the last event. A worker failing mid-turn ends the turn
// with no KV (its reservation is released; the next turn reloads from a cache node) and the call
// gets UNAVAILABLE naming the worker and the cause. The caller's deadline and cancellation reach
// the coordinator and the worker (propagated contexts).
//
// Tenancy: downstream a session is known by ScopedSessionId(tenant, id) and its KV states by a
// namespace key from the tenant's salt, so a tenant never sees another's sessions or states; a
// session whose coordinator record names another tenant answers NOT_FOUND with the message of an
// unknown id. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cluster/coordinators.h"
#include "core/common/grpc/server.h"
#include "core/kvstate/state_key.h"
#include "core/model/model.h"
#include "frontend/auth.h"
#include "frontend/frontend_metrics.h"
#include "frontend/tenant_calls.h"
#include "frontend/turn_request.h"
#include "glimpse/v1/coordinator.grpc.pb.h"
#include "glimpse/v1/decode_worker.grpc.pb.h"
#include "glimpse/v1/frontend.pb.h"
#include "glimpse/v1/prefill_worker.grpc.pb.h"

namespace glimpse::frontend {

struct FrontendOptions {
  std::vector<std::string> coordinator_addresses;  // host:port each (core/cluster/coordinators.h)
  TlsFiles client_tls;  // for the coordinator and decode workers; empty: plaintext
  // Deadline of a coordinator call the caller's deadline does not bound (and of EndTurn, which runs
  // after the caller may have gone); RouteTurn gets max_queue_wait on top.
  absl::Duration coordinator_timeout = absl::Seconds(10);
  absl::Duration max_queue_wait = absl::ZeroDuration();  // 0: the coordinator's default
  int64_t max_prompt_tokens = 0;                         // 0: the model's context - 1
  int32_t default_max_tokens = 256;
  int32_t max_output_tokens = 4096;
  absl::Duration max_tool_hint = absl::Hours(1);
  int64_t max_calls_per_tenant = 64;  // Generate calls in flight per tenant (tenant_calls.h)
  v1::EvictionPolicy default_policy;  // method "none"/"" keeps everything; codec "" is fp16
};

// One incoming call as the service sees it; FrontendGrpc makes it from the gRPC call.
class Caller {
 public:
  virtual ~Caller() = default;
  // The "authorization" header as sent; nullopt when there is none.
  virtual std::optional<std::string_view> Authorization() const = 0;
  // A context for a call made on the caller's behalf: the caller's deadline bounds it and its
  // cancellation cancels it.
  virtual std::unique_ptr<grpc::ClientContext> Propagate() const = 0;
  virtual bool IsCancelled() const = 0;
  virtual bool DeadlinePassed() const = 0;
};

// Sends one event of a turn to the caller; false when the caller went away.
using EventSink = std::function<bool(const v1::GenerateEvent&)>;

class FrontendService {
 public:
  // `model` (for its tokenizer, vocabulary, context and fingerprint) and `metrics` are not owned
  // and must outlive the service. Fails on a bad default policy or limit, naming it.
  static absl::StatusOr<std::unique_ptr<FrontendService>> Create(
      const FrontendOptions& options, const model::Model* model,
      std::unique_ptr<Authenticator> auth, std::string salt_secret, FrontendMetrics* metrics);

  // One turn; its events go to `send` in order (started, tokens..., done, lease).
  absl::Status Generate(const Caller& caller, const v1::GenerateRequest& req,
                        const EventSink& send);
  absl::Status GetSession(const Caller& caller, const v1::GetSessionRequest& req,
                          v1::GetSessionResponse* resp);
  absl::Status EndSession(const Caller& caller, const v1::EndSessionRequest& req,
                          v1::EndSessionResponse* resp);
  absl::Status ToolCallEnded(const Caller& caller, const v1::ToolCallEndedFrontendRequest& req,
                             v1::ToolCallEndedResponse* resp);

  const TurnLimits& limits() const { return limits_; }

 private:
  struct Call;  // one Generate in flight (frontend_generate.cc)

  FrontendService(const FrontendOptions& options, const model::Model* model,
                  std::unique_ptr<Authenticator> auth, std::string salt_secret,
                  FrontendMetrics* metrics, kvstate::Fingerprint fingerprint, TurnLimits limits,
                  std::unique_ptr<cluster::Coordinators> coordinators);

  // Shared by every method.
  absl::StatusOr<std::string> Authenticate(const Caller& caller) const;
  // Bound by `caller` when there is one; nullptr: a call on no caller's behalf.
  std::unique_ptr<grpc::ClientContext> CoordinatorContext(const Caller* caller,
                                                          absl::Duration extra = {}) const;
  // The coordinator's record of the caller's session (session_id as the caller knows it):
  // nullopt when it has none; NotFound with the unknown-id message when it is another tenant's.
  absl::StatusOr<std::optional<v1::SessionInfo>> FindSession(const Caller& caller,
                                                             const std::string& tenant,
                                                             const std::string& session_id) const;
  // As FindSession, with NotFound (the same message) for none.
  absl::StatusOr<v1::SessionInfo> OwnSession(const Caller& caller, const std::string& tenant,
                                             const std::string& session_id) const;
  absl::Status CoordinatorError(std::string_view rpc, const grpc::Status& status,
                                const std::string& scoped_id, const std::string& session_id) const;
  // One channel per worker address, made on first use and kept.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> WorkerChannel(const std::string& address);
  void ReleaseOnWorker(const std::string& worker_id, const std::string& scoped_id);

  // Generate's steps (frontend_generate.cc).
  absl::Status Route(Call& call);
  void PrefillOnWorker(Call& call);
  absl::StatusOr<v1::TurnDone> RunOnWorker(Call& call);
  absl::Status ForwardEvent(Call& call, const v1::DecodeEvent& event);
  absl::Status WorkerFailure(Call& call, const grpc::Status& status);
  absl::Status FinishTurn(Call& call, const v1::TurnDone& done);
  void AbandonTurn(Call& call);

  // Constant after construction.
  const FrontendOptions options_;
  const model::Model* const model_;
  const std::unique_ptr<Authenticator> auth_;
  const std::string salt_secret_;
  FrontendMetrics* const metrics_;
  const kvstate::Fingerprint fingerprint_;
  const TurnLimits limits_;
  const std::unique_ptr<cluster::Coordinators> coordinator_;

  TenantCalls calls_;

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glimpse::frontend
