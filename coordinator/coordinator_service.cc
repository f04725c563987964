// CoordinatorService: construction, restore, membership, leases, inspection. RouteTurn and the
// admission planner are in coordinator_route.cc.
#include "coordinator/coordinator_service.h"

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "proto/limits.h"

namespace glimpse::coordinator {

absl::StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Create(
    const CoordinatorOptions& options, Clock* clock, StateStore* store) {
  if (options.kv_bytes_per_token <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_bytes_per_token %d must be > 0", options.kv_bytes_per_token));
  }
  if (options.membership.heartbeat_interval <= absl::ZeroDuration() ||
      options.membership.missed_heartbeats < 1) {
    return absl::InvalidArgumentError("heartbeat interval must be > 0 and missed heartbeats >= 1");
  }
  auto service = std::unique_ptr<CoordinatorService>(new CoordinatorService(options, clock, store));
  RETURN_IF_ERROR(service->Restore());
  return service;
}

namespace {

// The estimator prices leases as reclaimable exactly when the planner demotes them for room.
LeaseEstimatorOptions EstimatorOptions(const CoordinatorOptions& options) {
  LeaseEstimatorOptions o = options.lease;
  o.reclaimable = options.demote_under_pressure;
  return o;
}

}  // namespace

CoordinatorService::CoordinatorService(const CoordinatorOptions& options, Clock* clock,
                                       StateStore* store)
    : options_(options),
      clock_(clock),
      store_(store),
      membership_(options.membership),
      ledger_(options.tenant_budget_bytes),
      estimator_(EstimatorOptions(options)) {
  for (const auto& [tenant, bytes] : options.tenant_budgets) ledger_.SetTenantLimit(tenant, bytes);
  last_estimator_save_ = clock_->Now();
  last_reap_ = clock_->Now();
}

CoordinatorService::~CoordinatorService() { (void)Flush(); }

absl::Status CoordinatorService::Restore() {
  absl::StatusOr<StoredState> state = store_->Load();
  if (!state.ok()) return state.status();
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  for (const NodeSpec& n : state->nodes) {
    membership_.Restore(n, now);
    if (n.role == NodeRole::kDecode) ledger_.SetWorkerCapacity(n.id, n.capacity_bytes);
  }
  for (SessionState s : state->sessions) {
    bool hot = s.tier != SessionTier::kWarm && s.reserved_bytes > 0;
    if (hot && !ledger_.Reserve(s.id, s.decode_worker, s.tenant, s.reserved_bytes).ok()) {
      hot = false;  // its worker is gone or the budgets changed: the KV is warm
    }
    if (!hot) {
      s.tier = SessionTier::kWarm;
      s.reserved_bytes = 0;
      s.lease_expires = absl::InfinitePast();
    }
    if (s.tier == SessionTier::kLeased) leases_.insert({s.lease_expires, s.id});
    sessions_[s.id] = s;
  }
  if (!state->estimator_json.empty()) {
    RETURN_IF_ERROR(estimator_.RestoreFromJson(state->estimator_json));
  }
  SweepLocked(now);  // leases that ended while the coordinator was down
  log::Info("coordinator state restored", {{"nodes", static_cast<long long>(state->nodes.size())},
                                           {"sessions", static_cast<long long>(sessions_.size())},
                                           {"leases", static_cast<long long>(leases_.size())}});
  return absl::OkStatus();
}

absl::Status CoordinatorService::NoteWriteLocked(absl::Status written) {
  if (written.ok() || !store_failed_.ok()) return store_failed_;
  store_failed_ = absl::UnavailableError(
      absl::StrCat("the coordinator's store failed a write; it changes nothing more until "
                   "restarted (or, elected on etcd, until it leads again): ",
                   written.ToString()));
  log::Error("coordinator store write failed; refusing changes", {{"error", written.ToString()}});
  if (options_.on_store_failure) options_.on_store_failure(store_failed_);
  return store_failed_;
}

void CoordinatorService::PersistLocked(const SessionState& s) {
  if (!store_failed_.ok()) return;  // fail-stop: nothing is written after a failure
  NoteWriteLocked(store_->PutSession(s)).IgnoreError();  // recorded in store_failed_
}

template <typename T>
absl::StatusOr<T> CoordinatorService::Acknowledged(const std::function<absl::StatusOr<T>()>& call,
                                                   bool grows) {
  {
    absl::MutexLock lock(&mu_);
    if (!store_failed_.ok()) return store_failed_;
  }
  // A disk that is nearly full refuses new records before anything moves (no fail-stop);
  // heartbeats go on, so members are not declared dead for it.
  if (grows) RETURN_IF_ERROR(store_->CanWrite());
  absl::StatusOr<T> out = call();
  // The call wrote unsynced under mu_; the fsync runs here, outside it, shared with every
  // call waiting at the same time.
  const absl::Status durable = store_->Durable();
  absl::MutexLock lock(&mu_);
  NoteWriteLocked(durable).IgnoreError();  // a failure is recorded in store_failed_
  if (!store_failed_.ok()) return store_failed_;
  return out;
}

absl::StatusOr<CoordinatorService::Registered> CoordinatorService::RegisterNode(
    const NodeSpec& spec) {
  return Acknowledged<Registered>([&] { return RegisterNodeUnchecked(spec); }, /*grows=*/true);
}

absl::StatusOr<std::vector<std::string>> CoordinatorService::Heartbeat(const std::string& node,
                                                                       const NodeLoad& load) {
  return Acknowledged<std::vector<std::string>>([&] { return HeartbeatUnchecked(node, load); });
}

absl::StatusOr<int> CoordinatorService::Deregister(const std::string& node) {
  return Acknowledged<int>([&] { return DeregisterUnchecked(node); });
}

absl::StatusOr<RouteResult> CoordinatorService::RouteTurn(const RouteRequest& r) {
  return Acknowledged<RouteResult>([&] { return RouteTurnUnchecked(r); }, /*grows=*/true);
}

absl::StatusOr<LeaseResult> CoordinatorService::EndTurn(const EndTurnRequest& r) {
  return Acknowledged<LeaseResult>([&] { return EndTurnUnchecked(r); });
}

absl::StatusOr<ToolEndResult> CoordinatorService::ToolCallEnded(
    const std::string& session, std::optional<absl::Duration> observed) {
  return Acknowledged<ToolEndResult>([&] { return ToolCallEndedUnchecked(session, observed); });
}

absl::StatusOr<int> CoordinatorService::EndSession(const std::string& session) {
  return Acknowledged<int>([&] { return EndSessionUnchecked(session); });
}

void CoordinatorService::MaybeSaveEstimatorLocked(absl::Time now, bool force) {
  if (!estimator_dirty_) return;
  if (!force && now - last_estimator_save_ < options_.estimator_save_interval) return;
  if (!store_failed_.ok() ||
      !NoteWriteLocked(store_->PutEstimator(estimator_.SerializeToJson())).ok()) {
    return;
  }
  estimator_dirty_ = false;
  last_estimator_save_ = now;
}

void CoordinatorService::DemoteLocked(SessionState& s, DemoteReason reason) {
  if (s.tier == SessionTier::kLeased) leases_.erase({s.lease_expires, s.id});
  ledger_.Release(s.id);
  if (!s.decode_worker.empty() && reason != DemoteReason::kDeadNode) {
    release_[s.decode_worker].push_back(s.id);
  }
  s.tier = SessionTier::kWarm;
  s.reserved_bytes = 0;
  s.lease_expires = absl::InfinitePast();
  switch (reason) {
    case DemoteReason::kExpired:
      ++counters_.demoted_expired;
      break;
    case DemoteReason::kPressure:
      ++counters_.demoted_pressure;
      break;
    case DemoteReason::kDeadNode:
      ++counters_.demoted_dead_node;
      break;
    default:
      break;
  }
  if (reason != DemoteReason::kEnded) PersistLocked(s);
  room_.SignalAll();
}

void CoordinatorService::BuryLocked(const std::string& id) {
  for (auto& [sid, s] : sessions_) {
    if (s.decode_worker == id && s.tier != SessionTier::kWarm) {
      DemoteLocked(s, DemoteReason::kDeadNode);
    }
  }
  ledger_.RemoveWorker(id);
  release_.erase(id);
  routed_since_heartbeat_.erase(id);
}

void CoordinatorService::SetAnnouncedWorkers(const Announced& workers) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const auto& [id, incarnation] : announced_) {
    if (workers.contains({id, incarnation})) continue;
    const NodeState* node = membership_.Find(id);
    if (node == nullptr || node->spec.incarnation != incarnation) continue;  // not this one
    if (membership_.Expire(id, now)) {
      log::Warning("node declared dead: its announcement on etcd ended", {{"node", id}});
      BuryLocked(id);
    }
  }
  announced_ = workers;
}

void CoordinatorService::SweepLocked(absl::Time now) {
  for (const std::string& id : membership_.Sweep(now)) {
    log::Warning("node declared dead", {{"node", id}});
    BuryLocked(id);
  }
  while (!leases_.empty() && leases_.begin()->first <= now) {
    auto it = sessions_.find(leases_.begin()->second);
    if (it == sessions_.end()) {
      leases_.erase(leases_.begin());
      continue;
    }
    DemoteLocked(it->second, DemoteReason::kExpired);
  }
  MaybeSaveEstimatorLocked(now, /*force=*/false);
}

void CoordinatorService::ReapLocked(absl::Time now) {
  if (now - last_reap_ < options_.reap_interval) return;
  last_reap_ = now;
  std::vector<std::string> forget;
  for (auto& [id, s] : sessions_) {
    if (s.tier == SessionTier::kActive && now - s.turn_started > options_.turn_timeout) {
      log::Warning("turn timed out", {{"session", id}, {"worker", s.decode_worker}});
      DemoteLocked(s, DemoteReason::kTurnTimeout);
      ++counters_.turns_timed_out;
    } else if (s.tier == SessionTier::kWarm &&
               now - std::max(s.turn_started, s.turn_ended) > options_.session_idle_ttl) {
      forget.push_back(id);
    }
  }
  for (const std::string& id : forget) {
    sessions_.erase(id);
    first_attempt_.erase(id);
    if (store_failed_.ok()) NoteWriteLocked(store_->DeleteSession(id)).IgnoreError();
    ++counters_.sessions_forgotten;
  }
  std::erase_if(first_attempt_,
                [&](const auto& entry) { return now - entry.second > options_.turn_timeout; });
  for (const std::string& id : membership_.Forget(now)) {
    log::Info("dead node forgotten", {{"node", id}});
    if (store_failed_.ok()) NoteWriteLocked(store_->DeleteNode(id)).IgnoreError();
    ++counters_.nodes_forgotten;
  }
}

void CoordinatorService::Tick() {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  ReapLocked(now);
}

absl::Status CoordinatorService::Flush() {
  absl::MutexLock lock(&mu_);
  MaybeSaveEstimatorLocked(clock_->Now(), /*force=*/true);
  return store_failed_;
}

absl::StatusOr<CoordinatorService::Registered> CoordinatorService::RegisterNodeUnchecked(
    const NodeSpec& spec) {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  const NodeState* before = membership_.Find(spec.id);
  const bool restarted = before != nullptr && before->spec.incarnation != spec.incarnation &&
                         !before->spec.incarnation.empty();
  absl::StatusOr<bool> again = membership_.Register(spec, now);
  if (!again.ok()) return again.status();
  Registered out{*again, 0};
  if (*again && restarted) {  // same node, new process: its hot KV is gone
    for (auto& [sid, s] : sessions_) {
      if (s.decode_worker == spec.id && s.tier != SessionTier::kWarm) {
        DemoteLocked(s, DemoteReason::kDeadNode);
        ++out.demoted;
      }
    }
  }
  if (spec.role == NodeRole::kDecode) {
    ledger_.SetWorkerCapacity(spec.id, spec.capacity_bytes);
    room_.SignalAll();
  }
  RETURN_IF_ERROR(NoteWriteLocked(store_->PutNode(spec)));
  log::Info("node registered", {{"node", spec.id},
                                {"role", std::string(NodeRoleName(spec.role))},
                                {"address", spec.grpc_address},
                                {"reregistered", static_cast<long long>(*again)}});
  return out;
}

absl::StatusOr<std::vector<std::string>> CoordinatorService::HeartbeatUnchecked(
    const std::string& node, const NodeLoad& load) {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  RETURN_IF_ERROR(membership_.Heartbeat(node, load, now));
  routed_since_heartbeat_.erase(node);
  std::vector<std::string> out;
  auto it = release_.find(node);
  if (it != release_.end()) {
    out = std::move(it->second);
    release_.erase(it);
  }
  return out;
}

absl::StatusOr<int> CoordinatorService::DeregisterUnchecked(const std::string& node) {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  RETURN_IF_ERROR(membership_.Deregister(node));
  int demoted = 0;
  for (auto& [sid, s] : sessions_) {
    if (s.decode_worker == node && s.tier != SessionTier::kWarm) {
      DemoteLocked(s, DemoteReason::kDeadNode);
      ++demoted;
    }
  }
  ledger_.RemoveWorker(node);
  release_.erase(node);
  routed_since_heartbeat_.erase(node);
  RETURN_IF_ERROR(NoteWriteLocked(store_->DeleteNode(node)));
  return demoted;
}

absl::StatusOr<LeaseResult> CoordinatorService::EndTurnUnchecked(const EndTurnRequest& r) {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  auto it = sessions_.find(r.session);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrFormat("EndTurn: unknown session \"%s\"", r.session));
  }
  SessionState& s = it->second;
  if (r.kv_tokens < 0 || r.kv_tokens > options_.max_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat("EndTurn %s: kv_tokens %d is outside [0, %d]",
                                                      r.session, r.kv_tokens, options_.max_tokens));
  }
  const int64_t summarised = r.summarised_tokens == 0 ? r.kv_tokens : r.summarised_tokens;
  if (summarised < r.kv_tokens || summarised > options_.max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("EndTurn %s: summarised_tokens %d is outside [kv_tokens %d, %d]", r.session,
                        r.summarised_tokens, r.kv_tokens, options_.max_tokens));
  }
  if (r.expected_duration.has_value() &&
      (*r.expected_duration < absl::ZeroDuration() || *r.expected_duration > options_.max_hint)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "EndTurn %s: expected tool duration %s is outside [0, %s]", r.session,
        absl::FormatDuration(*r.expected_duration), absl::FormatDuration(options_.max_hint)));
  }
  if (absl::Status s = v1::CheckToolName("tool name", r.tool); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("EndTurn %s: %s", r.session, s.message()));
  }
  if (r.prefill_wait.has_value() &&
      (*r.prefill_wait < absl::ZeroDuration() || *r.prefill_wait > options_.max_hint)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "EndTurn %s: prefill queue wait %s is outside [0, %s]", r.session,
        absl::FormatDuration(*r.prefill_wait), absl::FormatDuration(options_.max_hint)));
  }
  if (r.reload.has_value() && (*r.reload < absl::ZeroDuration() || *r.reload > options_.max_hint ||
                               r.reload_tokens < 0 || r.reload_tokens > options_.max_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("EndTurn %s: reload of %d tokens in %s is outside [0, %d] tokens, [0, %s]",
                        r.session, r.reload_tokens, absl::FormatDuration(*r.reload),
                        options_.max_tokens, absl::FormatDuration(options_.max_hint)));
  }
  if (r.turn_index != 0 && r.turn_index != s.turns) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "EndTurn %s: turn %d was superseded by turn %d", r.session, r.turn_index, s.turns));
  }
  if (s.tier == SessionTier::kLeased || s.turn_started <= s.turn_ended) {
    return absl::FailedPreconditionError(
        absl::StrFormat("EndTurn %s: no turn is running (route the turn first)", r.session));
  }
  s.summarised_tokens = summarised;
  if (r.turn_failed) return EndFailedTurnLocked(s, r, now);
  if (r.reload.has_value()) {
    estimator_.ObserveReload(r.reload_tokens, *r.reload);
    estimator_dirty_ = true;
  }
  if (r.prefill_wait.has_value() && !s.last_route_hot && s.turns > 1) {
    estimator_.ObservePrefillQueueDelay(*r.prefill_wait);  // a reload's share of Q
    estimator_dirty_ = true;
  }
  TtlDecision d = estimator_.Choose({s.tenant, r.tool}, r.kv_tokens, r.expected_duration);
  LeaseResult out{d.ttl, absl::InfinitePast(), d.source, d.reuse_probability, 0};
  s.turn_ended = now;
  s.tool = r.tool;
  s.tool_reported = false;
  s.kv_tokens = r.kv_tokens;
  s.ttl = d.ttl;
  // A worker that died during the turn already made the session warm.
  if (s.tier == SessionTier::kActive) {
    int64_t held = BytesFor(r.kv_tokens);
    if (d.ttl > absl::ZeroDuration() &&
        ledger_.Reserve(s.id, s.decode_worker, s.tenant, held).ok()) {
      s.tier = SessionTier::kLeased;
      s.reserved_bytes = held;
      s.lease_expires = now + d.ttl;
      leases_.insert({s.lease_expires, s.id});
      out.expires = s.lease_expires;
      out.held_bytes = held;
      room_.SignalAll();
    } else {
      if (d.ttl > absl::ZeroDuration()) out.source += "+no-room";
      out.ttl = absl::ZeroDuration();
      s.ttl = absl::ZeroDuration();
      DemoteLocked(s, DemoteReason::kTtlZero);
    }
  } else {
    out.ttl = absl::ZeroDuration();
    s.ttl = absl::ZeroDuration();
  }
  PersistLocked(s);
  return out;
}

LeaseResult CoordinatorService::EndFailedTurnLocked(SessionState& s, const EndTurnRequest& r,
                                                    absl::Time now) {
  s.turn_ended = now;
  s.tool.clear();
  s.tool_reported = true;  // no tool call follows a failed turn: nothing to sample
  s.kv_tokens = r.kv_tokens;
  s.ttl = absl::ZeroDuration();
  if (s.tier != SessionTier::kWarm) DemoteLocked(s, DemoteReason::kTurnFailed);
  PersistLocked(s);
  return {absl::ZeroDuration(), absl::InfinitePast(), "turn-failed", 0.0, 0};
}

absl::StatusOr<ToolEndResult> CoordinatorService::ToolCallEndedUnchecked(
    const std::string& session, std::optional<absl::Duration> observed) {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrFormat("ToolCallEnded: unknown session \"%s\"", session));
  }
  SessionState& s = it->second;
  if (observed.has_value() && (*observed < absl::ZeroDuration() || *observed > options_.max_hint)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ToolCallEnded %s: observed duration %s is outside [0, %s]", session,
                        absl::FormatDuration(*observed), absl::FormatDuration(options_.max_hint)));
  }
  if (s.tool_reported || s.turn_ended == absl::InfinitePast() || s.tier == SessionTier::kActive) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "ToolCallEnded %s: no tool call is pending (it was reported, or no turn has ended)",
        session));
  }
  absl::Duration d = observed.value_or(now - s.turn_ended);
  estimator_.ObserveToolDuration({s.tenant, s.tool}, d);
  estimator_dirty_ = true;
  s.tool_reported = true;
  PersistLocked(s);
  return ToolEndResult{s.tool, d, s.tier == SessionTier::kLeased};
}

absl::StatusOr<int> CoordinatorService::EndSessionUnchecked(const std::string& session) {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrFormat("EndSession: unknown session \"%s\"", session));
  }
  int turns = it->second.turns;
  if (it->second.tier != SessionTier::kWarm) DemoteLocked(it->second, DemoteReason::kEnded);
  estimator_.ObserveSessionEnd(turns);
  estimator_dirty_ = true;
  first_attempt_.erase(session);
  sessions_.erase(it);
  RETURN_IF_ERROR(NoteWriteLocked(store_->DeleteSession(session)));
  return turns;
}

absl::StatusOr<SessionState> CoordinatorService::GetSession(const std::string& session) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrFormat("GetSession: unknown session \"%s\"", session));
  }
  SessionState s = it->second;
  // A lease past its end reads as warm even before the next sweep.
  if (s.tier == SessionTier::kLeased && s.lease_expires <= clock_->Now()) {
    s.tier = SessionTier::kWarm;
    s.reserved_bytes = 0;
  }
  return s;
}

std::vector<NodeView> CoordinatorService::ListNodes(std::optional<NodeRole> role,
                                                    bool include_dead) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> leased;
  for (const auto& [expires, sid] : leases_) {
    auto it = sessions_.find(sid);
    if (it != sessions_.end()) ++leased[it->second.decode_worker];
  }
  std::vector<NodeView> out;
  for (const auto& [id, node] : membership_.nodes()) {
    if (role.has_value() && node.spec.role != *role) continue;
    if (!node.alive && !include_dead) continue;
    out.push_back(NodeView{node, ledger_.WorkerReserved(id), leased.count(id) ? leased[id] : 0});
  }
  return out;
}

CoordinatorStats CoordinatorService::Stats() const {
  absl::MutexLock lock(&mu_);
  CoordinatorStats st = counters_;
  for (const auto& [id, node] : membership_.nodes())
    (node.alive ? st.nodes_alive : st.nodes_dead)++;
  st.workers_announced = static_cast<int64_t>(announced_.size());
  for (const auto& [id, s] : sessions_) {
    if (s.tier == SessionTier::kActive) ++st.sessions_active;
    if (s.tier == SessionTier::kLeased) ++st.sessions_leased;
    if (s.tier == SessionTier::kWarm) ++st.sessions_warm;
  }
  st.queued = static_cast<int64_t>(queue_.size());
  st.reserved_bytes = ledger_.TotalReserved();
  st.capacity_bytes = ledger_.TotalCapacity();
  st.queue_delay = estimator_.QueueDelay();
  st.eta = estimator_.Eta();
  st.pin_cost = estimator_.PinCostWeight();
  for (const LeaseEstimator::ToolSummary& t : estimator_.Tools()) {
    st.tools.push_back(
        {t.tool.tenant, t.tool.tool, t.samples,
         estimator_.Choose(t.tool, CoordinatorStats::kStatsSessionTokens, std::nullopt).ttl,
         t.median});
  }
  return st;
}

bool CoordinatorService::CheckInvariants(std::string* why) const {
  absl::MutexLock lock(&mu_);
  if (!ledger_.CheckInvariants(why)) return false;
  for (const auto& [id, s] : sessions_) {
    const Reservation* r = ledger_.Find(id);
    int64_t bytes = r == nullptr ? 0 : r->bytes;
    if (bytes != s.reserved_bytes) {
      *why = absl::StrFormat("session %s: reserved_bytes %d but ledger holds %d", id,
                             s.reserved_bytes, bytes);
      return false;
    }
  }
  return true;
}

}  // namespace glimpse::coordinator
