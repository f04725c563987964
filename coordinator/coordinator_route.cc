// CoordinatorService::RouteTurn: validation, the admission planner (which worker, which leases to
// demote first), the FIFO admission queue, and applying a route.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/router.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "proto/limits.h"

namespace glimpse::coordinator {

absl::Status CoordinatorService::ValidateRouteLocked(const RouteRequest& r) const {
  RETURN_IF_ERROR(v1::CheckId("session_id", r.session));
  auto it = sessions_.find(r.session);
  if (it == sessions_.end() || !r.tenant.empty()) {
    if (absl::Status s = v1::CheckId("tenant", r.tenant); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("RouteTurn %s: %s", r.session, s.message()));
    }
  }
  if (it != sessions_.end() && !r.tenant.empty() && r.tenant != it->second.tenant) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RouteTurn %s: tenant \"%s\" differs from the session's tenant \"%s\"",
                        r.session, r.tenant, it->second.tenant));
  }
  if (r.history_tokens < 0 || r.new_tokens <= 0 || r.max_output_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RouteTurn %s: history_tokens %d, new_tokens %d, max_output_tokens %d "
                        "(need >= 0, > 0, >= 0)",
                        r.session, r.history_tokens, r.new_tokens, r.max_output_tokens));
  }
  int64_t total = r.history_tokens + r.new_tokens + r.max_output_tokens;
  if (r.history_tokens > options_.max_tokens || r.new_tokens > options_.max_tokens ||
      r.max_output_tokens > options_.max_tokens || total > options_.max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RouteTurn %s: %d tokens in all is over the limit of %d", r.session, total,
                        options_.max_tokens));
  }
  if (r.max_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrFormat("RouteTurn %s: max queue wait %s is negative",
                                                      r.session, absl::FormatDuration(r.max_wait)));
  }
  if (absl::Status s = v1::CheckToolName("tool name", r.tool); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("RouteTurn %s: %s", r.session, s.message()));
  }
  return absl::OkStatus();
}

double CoordinatorService::LostValueLocked(const SessionState& s, absl::Time now) const {
  // P(reuse before the lease ends) × (Q·eta + R(n)): the expected seconds the hot copy saves.
  double p = estimator_.ReuseProbability({s.tenant, s.tool}, now - s.turn_ended,
                                         s.lease_expires - s.turn_ended,
                                         /*fallback=*/0.5);
  double gain = absl::ToDoubleSeconds(estimator_.QueueDelay()) * estimator_.Eta() +
                absl::ToDoubleSeconds(estimator_.ReloadCostOf(s.kv_tokens));
  return p * gain;
}

std::vector<DecodeCandidate> CoordinatorService::DecodeCandidatesLocked() const {
  std::vector<DecodeCandidate> out;
  for (const auto& [id, node] : membership_.nodes()) {
    if (!node.alive || node.spec.role != NodeRole::kDecode || !ledger_.HasWorker(id)) continue;
    auto routed = routed_since_heartbeat_.find(id);
    out.push_back(
        {id, ledger_.WorkerCapacity(id), ledger_.WorkerFree(id),
         node.load.queue_length + (routed == routed_since_heartbeat_.end() ? 0 : routed->second)});
  }
  return out;
}

std::vector<CoordinatorService::Victim> CoordinatorService::DemotableLocked(
    const std::string& session, absl::Time now) const {
  std::vector<Victim> victims;
  if (!options_.demote_under_pressure) return victims;
  for (const auto& [expires, sid] : leases_) {
    if (sid == session) continue;
    const SessionState& v = sessions_.at(sid);
    const double value = LostValueLocked(v, now);
    const double hold_s = absl::ToDoubleSeconds(estimator_.ExpectedHold(
        {v.tenant, v.tool}, now - v.turn_ended, v.lease_expires - v.turn_ended));
    const double byte_seconds =
        static_cast<double>(std::max<int64_t>(1, v.reserved_bytes)) * std::max(hold_s, 1e-3);
    victims.push_back({&v, value, value / byte_seconds});
  }
  std::sort(victims.begin(), victims.end(), [](const Victim& a, const Victim& b) {
    return a.value_per_byte_second != b.value_per_byte_second
               ? a.value_per_byte_second < b.value_per_byte_second
               : a.s->id < b.s->id;
  });
  return victims;
}

absl::Status CoordinatorService::PlanTenantLocked(const std::string& session,
                                                  const std::string& tenant, int64_t need,
                                                  const std::vector<Victim>& victims, Plan* plan,
                                                  std::map<std::string, int64_t>* freed) const {
  const Reservation* own = ledger_.Find(session);
  if (own != nullptr) (*freed)[own->worker] += own->bytes;
  int64_t limit = ledger_.TenantLimit(tenant);
  if (limit <= 0) return absl::OkStatus();
  int64_t own_tenant = (own != nullptr && own->tenant == tenant) ? own->bytes : 0;
  int64_t over = ledger_.TenantReserved(tenant) - own_tenant + need - limit;
  for (const Victim& v : victims) {  // the tenant's own leases, least valuable first
    if (over <= 0) break;
    if (v.s->tenant != tenant) continue;
    plan->victims.push_back(v.s->id);
    (*freed)[v.s->decode_worker] += v.s->reserved_bytes;
    over -= v.s->reserved_bytes;
  }
  if (over <= 0) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant %s: %d of its %d-byte budget reserved; session %s needs %d more than it holds",
      tenant, ledger_.TenantReserved(tenant), limit, session, need - own_tenant));
}

absl::StatusOr<CoordinatorService::Plan> CoordinatorService::PlanAdmissionLocked(
    const std::string& session, const std::string& tenant, int64_t need,
    const std::string* only_worker) const {
  const std::vector<Victim> victims = DemotableLocked(session, clock_->Now());
  Plan plan;
  std::map<std::string, int64_t> freed;  // per worker, by the tenant's victims and the session
  RETURN_IF_ERROR(PlanTenantLocked(session, tenant, need, victims, &plan, &freed));
  std::vector<DecodeCandidate> candidates = DecodeCandidatesLocked();
  if (only_worker != nullptr) {
    std::erase_if(candidates, [&](const DecodeCandidate& c) { return c.id != *only_worker; });
  }
  if (candidates.empty()) {
    return absl::UnavailableError(
        only_worker != nullptr ? absl::StrFormat("decode worker %s is not alive", *only_worker)
                               : std::string("no live decode worker is registered"));
  }
  for (DecodeCandidate& c : candidates) {  // may be negative after a worker shrank its capacity
    c.free_bytes = ledger_.WorkerCapacity(c.id) - ledger_.WorkerReserved(c.id) + freed[c.id];
  }
  // A worker with room as is (least loaded), else the one where demoting costs least.
  if (std::optional<std::string> w = PickDecodeWorker(candidates, need)) {
    plan.worker = *w;
    return plan;
  }
  const std::set<std::string> chosen(plan.victims.begin(), plan.victims.end());
  double best_cost = 0;
  std::vector<std::string> best_extra;
  int64_t largest_free = 0;
  for (const DecodeCandidate& c : candidates) {
    int64_t free = c.free_bytes;
    double cost = 0;
    std::vector<std::string> extra;
    for (const Victim& v : victims) {
      if (free >= need) break;
      if (v.s->decode_worker != c.id || chosen.count(v.s->id)) continue;
      free += v.s->reserved_bytes;
      cost += v.value;
      extra.push_back(v.s->id);
    }
    largest_free = std::max(largest_free, free);
    if (free >= need && (plan.worker.empty() || cost < best_cost)) {
      plan.worker = c.id;
      best_cost = cost;
      best_extra = std::move(extra);
    }
  }
  if (plan.worker.empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "session %s needs %d bytes; the most any live decode worker%s could free is %d", session,
        need, only_worker != nullptr ? absl::StrFormat(" (%s)", *only_worker) : "", largest_free));
  }
  plan.victims.insert(plan.victims.end(), best_extra.begin(), best_extra.end());
  return plan;
}

RouteResult CoordinatorService::ApplyRouteLocked(const RouteRequest& r, const Plan& plan, bool hot,
                                                 absl::Time now, absl::Time first_attempt) {
  for (const std::string& v : plan.victims) DemoteLocked(sessions_.at(v), DemoteReason::kPressure);
  auto [it, fresh] = sessions_.try_emplace(r.session);
  SessionState& s = it->second;
  if (fresh) {
    s.id = r.session;
    s.tenant = r.tenant;
  }
  if (!hot && s.tier != SessionTier::kWarm) DemoteLocked(s, DemoteReason::kMoved);
  if (s.tier == SessionTier::kLeased) leases_.erase({s.lease_expires, s.id});
  int64_t need = BytesFor(r.history_tokens + r.new_tokens + r.max_output_tokens);
  // The plan made room under mu_, so this cannot fail; a failure is a bug worth a loud log.
  if (absl::Status st = ledger_.Reserve(s.id, plan.worker, s.tenant, need); !st.ok()) {
    log::Error("coordinator: planned reservation failed", {{"error", std::string(st.message())}});
  }
  // The pause since the last EndTurn is the tool's duration unless ToolCallEnded reported it.
  if (!s.tool_reported && s.turn_ended != absl::InfinitePast()) {
    estimator_.ObserveToolDuration({s.tenant, r.tool.empty() ? s.tool : r.tool},
                                   first_attempt - s.turn_ended);
    estimator_dirty_ = true;
  }
  if (!hot && s.turns > 0) {
    estimator_.ObserveQueueDelay(now - first_attempt);
    estimator_dirty_ = true;
  }
  // Pressure for the pin cost: this turn waited for memory (demoting leases made no one wait).
  estimator_.ObserveAdmission(now > first_attempt);
  first_attempt_.erase(r.session);
  // A pending "drop it" for this worker is stale now that the session runs there again.
  if (auto rel = release_.find(plan.worker); rel != release_.end()) std::erase(rel->second, s.id);
  s.tier = SessionTier::kActive;
  s.decode_worker = plan.worker;
  s.reserved_bytes = need;
  s.turns += 1;
  s.turn_started = now;
  s.tool_reported = true;
  s.last_route_hot = hot;
  s.lease_expires = absl::InfinitePast();
  PersistLocked(s);

  RouteResult out;
  out.decode = membership_.Find(plan.worker)->spec;
  out.hot_hit = hot;
  out.reserved_bytes = need;
  out.queue_wait = now - first_attempt;
  out.turn_index = s.turns;
  std::vector<PrefillCandidate> prefill;
  for (const auto& [id, node] : membership_.nodes()) {
    if (!node.alive || node.spec.role != NodeRole::kPrefill) continue;
    auto routed = routed_since_heartbeat_.find(id);
    prefill.push_back({id, node.load.queue_length +
                               (routed == routed_since_heartbeat_.end() ? 0 : routed->second)});
  }
  PrefillChoice p = PickPrefill(prefill, r.new_tokens, options_.prefill_on_decode_tokens);
  out.prefill_on_decode = p.on_decode;
  if (!p.on_decode) {
    out.prefill = membership_.Find(p.worker)->spec;
    ++routed_since_heartbeat_[p.worker];
  }
  ++routed_since_heartbeat_[plan.worker];
  ++counters_.routes;
  if (hot) ++counters_.hot_hits;
  return out;
}

absl::Status CoordinatorService::NeverFitsLocked(const RouteRequest& r, int64_t need) const {
  // Waiting cannot help a turn larger than every live worker or than its tenant's whole budget.
  int64_t largest = 0;
  for (const DecodeCandidate& c : DecodeCandidatesLocked())
    largest = std::max(largest, c.capacity_bytes);
  if (largest > 0 && need > largest) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("session %s needs %d bytes; the largest live decode worker has %d",
                        r.session, need, largest));
  }
  auto it = sessions_.find(r.session);
  const std::string& tenant = it != sessions_.end() ? it->second.tenant : r.tenant;
  int64_t limit = ledger_.TenantLimit(tenant);
  if (limit > 0 && need > limit) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("session %s needs %d bytes; tenant %s's whole budget is %d", r.session,
                        need, tenant, limit));
  }
  return absl::OkStatus();
}

void CoordinatorService::LeaveQueueLocked(uint64_t ticket) {
  if (ticket == 0) return;
  std::erase(queue_, ticket);
  room_.SignalAll();
}

absl::StatusOr<RouteResult> CoordinatorService::RouteTurnUnchecked(const RouteRequest& r) {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  SweepLocked(now);
  RETURN_IF_ERROR(ValidateRouteLocked(r));
  // A refused session's retries measure their wait from its first attempt; past the bound on
  // remembered attempts, from this one.
  absl::Time first = now;
  if (auto it = first_attempt_.find(r.session); it != first_attempt_.end()) {
    first = it->second;
  } else if (first_attempt_.size() < kMaxFirstAttempts) {
    first_attempt_.emplace(r.session, now);
  }
  if (r.arrived.has_value() && *r.arrived < first && *r.arrived <= now) first = *r.arrived;
  absl::Duration wait =
      r.max_wait == absl::ZeroDuration() ? options_.admission_default_wait : r.max_wait;
  absl::Time deadline = r.no_wait ? now : now + std::min(wait, options_.admission_max_wait);
  int64_t need = BytesFor(r.history_tokens + r.new_tokens + r.max_output_tokens);
  if (absl::Status never = NeverFitsLocked(r, need); !never.ok()) {
    first_attempt_.erase(r.session);
    ++counters_.rejected;
    return never;
  }
  uint64_t ticket = 0;
  while (true) {
    auto it = sessions_.find(r.session);
    const std::string tenant = it != sessions_.end() ? it->second.tenant : r.tenant;
    // Hot: the session's KV is pinned on a live worker; it does not queue behind cold turns.
    if (it != sessions_.end() && it->second.tier != SessionTier::kWarm) {
      absl::StatusOr<Plan> plan =
          PlanAdmissionLocked(r.session, tenant, need, &it->second.decode_worker);
      if (plan.ok()) {
        LeaveQueueLocked(ticket);
        return ApplyRouteLocked(r, *plan, /*hot=*/true, now, first);
      }
    }
    absl::Status last;
    if (queue_.empty() || queue_.front() == ticket) {
      absl::StatusOr<Plan> plan = PlanAdmissionLocked(r.session, tenant, need, nullptr);
      if (plan.ok()) {
        LeaveQueueLocked(ticket);
        return ApplyRouteLocked(r, *plan, /*hot=*/false, now, first);
      }
      if (!absl::IsResourceExhausted(plan.status())) {
        LeaveQueueLocked(ticket);
        first_attempt_.erase(r.session);
        return plan.status();
      }
      last = plan.status();
    } else {
      last = absl::ResourceExhaustedError(absl::StrFormat(
          "session %s is queued behind %d earlier turns", r.session, queue_.size()));
    }
    if (now >= deadline) {
      LeaveQueueLocked(ticket);
      ++counters_.rejected;
      if (!r.no_wait) estimator_.ObserveAdmission(true);  // a caller queueing itself retries
      if (!r.no_wait) first_attempt_.erase(r.session);
      return absl::ResourceExhaustedError(absl::StrFormat("%s (waited %s in the admission queue)",
                                                          last.message(),
                                                          absl::FormatDuration(now - first)));
    }
    if (ticket == 0) {
      if (static_cast<int64_t>(queue_.size()) >= options_.max_queued_turns) {
        ++counters_.rejected;
        ++counters_.refused_queue_full;
        estimator_.ObserveAdmission(true);
        first_attempt_.erase(r.session);
        return absl::ResourceExhaustedError(
            absl::StrFormat("%s; the admission queue is full (%d turns wait): try again later",
                            last.message(), queue_.size()));
      }
      ticket = next_ticket_++;
      queue_.push_back(ticket);
    }
    // Real-time slices, so that a FakeClock moved by a test is noticed too.
    room_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
    now = clock_->Now();
    SweepLocked(now);
  }
}

}  // namespace glimpse::coordinator
