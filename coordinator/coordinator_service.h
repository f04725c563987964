// CoordinatorService: the coordinator's logic, without gRPC (DESIGN.md sections 1 and 6).
//
// It owns membership (membership.h), the KV budgets of decode workers and tenants (budgets.h),
// TTL leases on sessions' hot KV chosen by the lease estimator (lease_estimator.h) and routing
// (router.h), and keeps what must survive a restart in a StateStore (state_store.h). Time comes
// only from the injected Clock, so tests and the simulator drive it with a FakeClock.
//
// A session's life: RouteTurn reserves (history + new + max_output) · kv_bytes_per_token bytes on a
// decode worker and its tenant (tier ACTIVE) → EndTurn shrinks the reservation to the kept KV and
// pins it for tau (tier LEASED; tau = 0 demotes at once) → the lease expires, or memory pressure
// demotes it, or its worker dies (tier WARM, budget freed; the KV is on cache nodes) → the next
// RouteTurn is a hot hit on the same worker when still LEASED, else goes to the least-loaded worker
// with room. When no worker has room, RouteTurn demotes the leases whose hot copy is least
// valuable per byte-second (P(reuse before the lease ends) · (Q·eta + R(n)) / (bytes × the
// expected time it still holds them), smallest first; on the worker where that loses least) if
// that makes room, else waits in a FIFO admission queue
// until its deadline and answers RESOURCE_EXHAUSTED. A hot turn does not queue behind cold ones.
//
// Errors carry the offending value; a call that fails changes no visible state. Thread-safe: one
// mutex serialises every call; RouteTurn releases it while it waits in the admission queue.
//
// Durability, fail-stop: a call that changes state returns OK only when the store took every
// write it made. When a write fails, that call and every later one that would change state answer
// UNAVAILABLE with the first failure (reads go on), CoordinatorOptions::on_store_failure is called
// once (the service marks its gRPC health NOT_SERVING), and a restart reloads the last state the
// store acknowledged: a route or a lease is never acknowledged without being written.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/budgets.h"
#include "coordinator/lease_estimator.h"
#include "coordinator/membership.h"
#include "coordinator/router.h"
#include "coordinator/state_store.h"
#include "coordinator/types.h"
#include "core/common/clock.h"

namespace glimpse::coordinator {

// The payload under which an UNAVAILABLE from a coordinator that does not lead names the
// leader's address (leadership.h); the gRPC adapter hands it to the caller as trailing metadata
// (core/cluster/coordinators.h).
inline constexpr char kLeaderPayload[] = "glimpse.coordinator.leader";

struct CoordinatorOptions {
  // Called once, with mu_ held (do not call back into the service), when the store first fails.
  std::function<void(const absl::Status&)> on_store_failure;
  MembershipOptions membership;
  LeaseEstimatorOptions lease;
  // KV bytes one token occupies on a decode worker. Default: SmolLM2-135M, 30 layers × 3 kv-heads
  // × 265 B (fp16 page bytes per token, docs/kv_pages.md).
  int64_t kv_bytes_per_token = 30 * 3 * 265;
  int64_t tenant_budget_bytes = 0;  // per tenant unless listed below; 0: unlimited
  std::map<std::string, int64_t> tenant_budgets;
  int64_t prefill_on_decode_tokens =
      128;  // new tokens up to this are prefilled on the decode worker
  absl::Duration admission_default_wait = absl::Seconds(1);
  absl::Duration admission_max_wait = absl::Seconds(30);
  // Turns waiting in the admission queue at most; one more is RESOURCE_EXHAUSTED at once.
  int64_t max_queued_turns = 256;
  int64_t max_tokens = int64_t{1} << 22;     // a turn or session over this is an absurd request
  absl::Duration max_hint = absl::Hours(1);  // longer tool-duration hints are rejected
  bool demote_under_pressure = true;
  absl::Duration estimator_save_interval = absl::Seconds(5);
  // Housekeeping in Tick, at most once per reap_interval: a turn routed but not ended after
  // turn_timeout (its frontend is gone) loses its reservation; a warm session idle for
  // session_idle_ttl is forgotten (as if EndSession came, without counting its turns); a node dead
  // for membership.forget_dead_after is forgotten; a refused session's first attempt (the origin
  // of its admission wait when it retries) is forgotten after turn_timeout.
  absl::Duration turn_timeout = absl::Minutes(10);
  absl::Duration session_idle_ttl = absl::Hours(24);
  absl::Duration reap_interval = absl::Seconds(10);
};

struct RouteRequest {
  std::string session;
  std::string tenant;
  int64_t history_tokens = 0;
  int64_t new_tokens = 0;
  int64_t max_output_tokens = 0;
  std::string tool;  // the tool whose result this turn carries; "" = the one named at EndTurn
  absl::Duration max_wait = absl::ZeroDuration();  // 0: admission_default_wait
  bool no_wait = false;  // answer at once (the simulator queues by itself)
  // When the turn reached a caller that queues by itself; the admission wait (Q) is measured
  // from it. Default: the first RouteTurn attempt for the session.
  std::optional<absl::Time> arrived;
};

struct RouteResult {
  NodeSpec decode;
  bool hot_hit = false;
  bool prefill_on_decode = true;
  NodeSpec prefill;  // id empty when prefill_on_decode
  int64_t reserved_bytes = 0;
  absl::Duration queue_wait;
  int turn_index = 0;
};

struct EndTurnRequest {
  std::string session;
  int64_t kv_tokens = 0;
  std::string tool;
  std::optional<absl::Duration> expected_duration;  // client hint
  // How long this turn's prefill waited in its prefill worker's queue, when the caller knows.
  std::optional<absl::Duration> prefill_wait;
  // The turn did not finish on its decode worker: no lease, the session is demoted now (its next
  // turn goes warm or recomputes) and the pause that follows is not a tool-duration sample.
  bool turn_failed = false;
  // What this turn's reload of `reload_tokens` stored tokens cost its decode worker (a warm turn),
  // measured there: R(n) is fitted to these (lease_estimator.h).
  std::optional<absl::Duration> reload = std::nullopt;
  int64_t reload_tokens = 0;
  // RouteResult::turn_index of the turn being ended; 0: the latest. An older turn is refused.
  int turn_index = 0;
  // Conversation tokens the session's state summarises, >= kv_tokens; 0: kv_tokens.
  int64_t summarised_tokens = 0;
};

struct LeaseResult {
  absl::Duration ttl;
  absl::Time expires = absl::InfinitePast();
  std::string source;
  double reuse_probability = 0;
  int64_t held_bytes = 0;
};

struct ToolEndResult {
  std::string tool;
  absl::Duration recorded;
  bool lease_alive = false;
};

struct NodeView {
  NodeState state;
  int64_t reserved_bytes = 0;
  int64_t leased_sessions = 0;
};

struct CoordinatorStats {
  int64_t nodes_alive = 0, nodes_dead = 0;
  int64_t workers_announced = 0;  // on etcd, as SetAnnouncedWorkers last said
  int64_t sessions_active = 0, sessions_leased = 0, sessions_warm = 0;
  int64_t reserved_bytes = 0, capacity_bytes = 0;
  int64_t routes = 0, hot_hits = 0, rejected = 0;
  int64_t queued = 0;  // turns waiting in the admission queue now
  int64_t demoted_expired = 0, demoted_pressure = 0, demoted_dead_node = 0;
  int64_t turns_timed_out = 0, sessions_forgotten = 0, nodes_forgotten = 0;
  int64_t refused_queue_full = 0;  // turns refused because the admission queue was full
  absl::Duration queue_delay;
  double eta = 0;
  double pin_cost = 1;  // the estimator's c
  struct Tool {
    std::string tenant;
    std::string name;
    int64_t samples;
    absl::Duration ttl;  // for a session of kStatsSessionTokens now
    absl::Duration median;
  };
  std::vector<Tool> tools;
  static constexpr int64_t kStatsSessionTokens = 1000;
};

class CoordinatorService {
 public:
  // Loads the store's state: nodes come back alive with a fresh heartbeat timeout (workers
  // re-register), sessions with their leases and reservations, the estimator with its samples.
  // `clock` and `store` are not owned and must outlive the service.
  static absl::StatusOr<std::unique_ptr<CoordinatorService>> Create(
      const CoordinatorOptions& options, Clock* clock, StateStore* store);
  ~CoordinatorService();

  // Membership.
  struct Registered {
    bool reregistered = false;  // the id was known at the same address
    int demoted = 0;            // hot sessions demoted: the node came back as a new incarnation
  };
  absl::StatusOr<Registered> RegisterNode(const NodeSpec& spec);
  // Returns the sessions whose hot copy on the node is no longer pinned since the last heartbeat.
  absl::StatusOr<std::vector<std::string>> Heartbeat(const std::string& node, const NodeLoad& load);
  absl::StatusOr<int> Deregister(const std::string& node);  // returns sessions demoted

  // Turns and leases.
  absl::StatusOr<RouteResult> RouteTurn(const RouteRequest& request);
  absl::StatusOr<LeaseResult> EndTurn(const EndTurnRequest& request);
  absl::StatusOr<ToolEndResult> ToolCallEnded(const std::string& session,
                                              std::optional<absl::Duration> observed);
  absl::StatusOr<int> EndSession(const std::string& session);  // returns its turns

  // Inspection.
  absl::StatusOr<SessionState> GetSession(const std::string& session) const;
  std::vector<NodeView> ListNodes(std::optional<NodeRole> role, bool include_dead) const;
  CoordinatorStats Stats() const;

  // Declares dead nodes dead and expires leases due by now; saves the estimator when due. Every
  // call also does this; a service calls Tick periodically so that leases end on time when idle.
  void Tick();
  // The workers announced on etcd now, as (node id, incarnation) (cluster/etcd_membership.h): a
  // worker whose registered incarnation was announced before and is gone since is declared dead
  // at once, as a missed heartbeat would later. Workers that never announced themselves, and one
  // whose earlier incarnation's announcement ends after it registered again, are left alone.
  using Announced = std::set<std::pair<std::string, std::string>>;
  void SetAnnouncedWorkers(const Announced& workers);
  // Saves the estimator (called at shutdown).
  absl::Status Flush();

  const CoordinatorOptions& options() const { return options_; }
  // For tests: the budget invariants hold (see BudgetLedger::CheckInvariants).
  bool CheckInvariants(std::string* why) const;

 private:
  enum class DemoteReason {
    kExpired,
    kPressure,
    kDeadNode,
    kTtlZero,
    kMoved,
    kEnded,
    kTurnTimeout,
    kTurnFailed
  };
  struct Plan {
    std::string worker;
    std::vector<std::string> victims;  // leases to demote first
  };

  CoordinatorService(const CoordinatorOptions& options, Clock* clock, StateStore* store);
  absl::Status Restore();

  // The state-changing calls, before the fail-stop check (Acknowledged).
  absl::StatusOr<Registered> RegisterNodeUnchecked(const NodeSpec& spec);
  absl::StatusOr<std::vector<std::string>> HeartbeatUnchecked(const std::string& node,
                                                              const NodeLoad& load);
  absl::StatusOr<int> DeregisterUnchecked(const std::string& node);
  absl::StatusOr<RouteResult> RouteTurnUnchecked(const RouteRequest& request);
  absl::StatusOr<LeaseResult> EndTurnUnchecked(const EndTurnRequest& request);
  absl::StatusOr<ToolEndResult> ToolCallEndedUnchecked(const std::string& session,
                                                       std::optional<absl::Duration> observed);
  absl::StatusOr<int> EndSessionUnchecked(const std::string& session);
  // Runs `call` unless the store has failed, and answers the store's failure instead of its
  // result when a write failed meanwhile.
  template <typename T>
  // `grows`: the call may add records (a node, a session), so a nearly full disk refuses it;
  // the others (liveness, turn ends, releases) only rewrite or drop bounded ones and always run.
  absl::StatusOr<T> Acknowledged(const std::function<absl::StatusOr<T>()>& call,
                                 bool grows = false);
  // Records a store write's outcome; returns the first failure (or OK).
  absl::Status NoteWriteLocked(absl::Status written) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // All *Locked functions need mu_ held.
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What follows a node's death: its sessions demoted, its budget and bookkeeping dropped.
  void BuryLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DemoteLocked(SessionState& s, DemoteReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LeaseResult EndFailedTurnLocked(SessionState& s, const EndTurnRequest& r, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failure is recorded (NoteWriteLocked).
  void PersistLocked(const SessionState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeSaveEstimatorLocked(absl::Time now, bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateRouteLocked(const RouteRequest& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `ticket` (0: none) out of the admission queue and wakes the turns waiting in it.
  void LeaveQueueLocked(uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when no amount of waiting could admit the turn.
  absl::Status NeverFitsLocked(const RouteRequest& r, int64_t need) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lease that may be demoted under pressure: what demoting it is expected to cost (seconds of
  // reload, LostValueLocked) and that per byte-second of memory it is expected to hold.
  struct Victim {
    const SessionState* s;
    double value;
    double value_per_byte_second;
  };
  // Every lease but `session`'s, least valuable per byte-second first (none when demotion is
  // off): memory is rented by the second, and a lease whose turn is near frees its memory soon
  // and saves its reload, where one whose turn is far (or never comes) holds it long for the
  // same saving.
  std::vector<Victim> DemotableLocked(const std::string& session, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds to `plan` the tenant's own leases to demote so that it fits its limit, and to `freed`
  // (per worker) their bytes and the session's own reservation.
  absl::Status PlanTenantLocked(const std::string& session, const std::string& tenant, int64_t need,
                                const std::vector<Victim>& victims, Plan* plan,
                                std::map<std::string, int64_t>* freed) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Room for `need` bytes for `s` (tenant `tenant`), only on `only_worker` when set.
  absl::StatusOr<Plan> PlanAdmissionLocked(const std::string& session, const std::string& tenant,
                                           int64_t need, const std::string* only_worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double LostValueLocked(const SessionState& s, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RouteResult ApplyRouteLocked(const RouteRequest& r, const Plan& plan, bool hot, absl::Time now,
                               absl::Time first_attempt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<DecodeCandidate> DecodeCandidatesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t BytesFor(int64_t tokens) const { return tokens * options_.kv_bytes_per_token; }

  const CoordinatorOptions options_;
  Clock* const clock_;
  StateStore* const store_;

  mutable absl::Mutex mu_;
  absl::CondVar room_;  // signalled when memory is freed or the queue head leaves
  Membership membership_ ABSL_GUARDED_BY(mu_);
  BudgetLedger ledger_ ABSL_GUARDED_BY(mu_);
  LeaseEstimator estimator_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SessionState> sessions_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, std::string>> leases_ ABSL_GUARDED_BY(mu_);      // expiry order
  std::map<std::string, std::vector<std::string>> release_ ABSL_GUARDED_BY(mu_);  // per node
  std::map<std::string, int64_t> routed_since_heartbeat_ ABSL_GUARDED_BY(mu_);
  static constexpr size_t kMaxFirstAttempts = size_t{1} << 16;
  // When refused sessions first asked (at most kMaxFirstAttempts).
  std::map<std::string, absl::Time> first_attempt_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> queue_ ABSL_GUARDED_BY(mu_);  // admission tickets
  absl::Status store_failed_ ABSL_GUARDED_BY(mu_);   // the first store write that failed
  Announced announced_ ABSL_GUARDED_BY(mu_);         // SetAnnouncedWorkers' last
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time last_estimator_save_ ABSL_GUARDED_BY(mu_);
  absl::Time last_reap_ ABSL_GUARDED_BY(mu_);
  bool estimator_dirty_ ABSL_GUARDED_BY(mu_) = false;
  CoordinatorStats counters_ ABSL_GUARDED_BY(mu_);  // counter fields only
};

}  // namespace glimpse::coordinator
