#include "bench/coordinator_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <functional>
#include <numeric>
#include <queue>
#include <random>
#include <sstream>

#include "absl/strings/str_format.h"
#include "coordinator/coordinator_service.h"
#include "core/common/status_macros.h"
#include "nlohmann/json.hpp"

namespace glimpse::coordinator::sim {

absl::StatusOr<Figures> LoadFigures(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot read %s", path));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrFormat("%s: not JSON", path));
  Figures f;
  try {
    f.prefill_tps = j.at("prefill_tokens_per_s").at("value").get<double>();
    f.decode_tps = j.at("decode_tokens_per_s").at("value").get<double>();
    f.reload_bytes_per_s = j.at("reload_bytes_per_s").at("value").get<double>();
    f.kv_bytes_per_token = j.at("kv_bytes_per_token").at("value").get<double>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, e.what()));
  }
  if (f.prefill_tps <= 0 || f.decode_tps <= 0 || f.reload_bytes_per_s <= 0 ||
      f.kv_bytes_per_token <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: every figure must be > 0", path));
  }
  return f;
}

std::vector<SessionSpec> MakeWorkload(const WorkloadOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.arrival_rate);
  std::uniform_int_distribution<int> turns(o.min_turns, o.max_turns);
  std::uniform_int_distribution<int> first(o.first_min, o.first_max), next(o.next_min, o.next_max);
  std::uniform_int_distribution<int> out(o.out_min, o.out_max);
  std::vector<double> weights;
  for (const ToolSpec& t : o.tools) weights.push_back(t.weight);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::normal_distribution<double> normal(0, 1);
  std::vector<SessionSpec> sessions;
  double t = 0;
  for (int i = 0; i < o.sessions; ++i) {
    t += gap(rng);
    SessionSpec s{absl::StrFormat("s%d", i), t, {}};
    int n = turns(rng);
    for (int k = 0; k < n; ++k) {
      TurnSpec turn{k == 0 ? first(rng) : next(rng), out(rng), "", 0};
      if (k + 1 < n) {
        const ToolSpec& tool = o.tools[pick(rng)];
        turn.tool = tool.name;
        turn.tool_s = tool.median_s * std::exp(tool.sigma * normal(rng));
      }
      s.turns.push_back(turn);
    }
    sessions.push_back(std::move(s));
  }
  return sessions;
}

namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(p * v.size())) - 1;
  return v[std::min(i, v.size() - 1)];
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

// One simulation run: the event loop and the cluster's state.
class Simulation {
 public:
  Simulation(const std::vector<SessionSpec>& workload, const ClusterOptions& cluster,
             const Figures& figures, CoordinatorService* svc, FakeClock* clock, absl::Time start)
      : workload_(workload),
        cluster_(cluster),
        fig_(figures),
        svc_(svc),
        clock_(clock),
        start_(start),
        state_(workload.size()),
        prefill_free_at_(cluster.prefill_workers, 0),
        prefill_pending_(cluster.prefill_workers, 0),
        prefill_busy_s_(cluster.prefill_workers, 0) {}

  absl::Status Run(Result* out) {
    for (size_t i = 0; i < workload_.size(); ++i) {
      At(workload_[i].arrival_s, [this, i] { Request(i); });
    }
    while (!events_.empty()) {
      Event e = events_.top();
      events_.pop();
      now_ = e.t;
      clock_->Set(start_ + absl::Seconds(now_));
      e.fn();
      if (!error_.ok()) return error_;
    }
    if (!queue_.empty()) return absl::InternalError("simulation ended with turns still queued");
    out->sessions_done = static_cast<int>(jct_.size());
    out->sessions_refused = refused_;
    out->jct_mean_s = Mean(jct_);
    out->jct_p50_s = Percentile(jct_, 0.5);
    out->jct_p99_s = Percentile(jct_, 0.99);
    out->ttft_mean_s = Mean(ttft_);
    out->ttft_p50_s = Percentile(ttft_, 0.5);
    out->ttft_p99_s = Percentile(ttft_, 0.99);
    out->hot_rate = later_turns_ ? static_cast<double>(hot_) / later_turns_ : 0;
    out->queue_wait_mean_s = Mean(waits_);
    out->makespan_s = now_;
    double busy = std::accumulate(prefill_busy_s_.begin(), prefill_busy_s_.end(), 0.0);
    out->prefill_busy = now_ > 0 ? busy / (now_ * cluster_.prefill_workers) : 0;
    CoordinatorStats st = svc_->Stats();
    out->demoted_pressure = st.demoted_pressure;
    out->demoted_expired = st.demoted_expired;
    return absl::OkStatus();
  }

 private:
  struct Event {
    double t;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  struct SessionRun {
    size_t turn = 0;
    int64_t history = 0;  // KV tokens after the last turn
    double requested_at = 0;
    double prefill_wait = 0;  // of the running turn, in its prefill worker's queue
  };

  void At(double t, std::function<void()> fn) { events_.push({t, seq_++, std::move(fn)}); }

  RouteRequest MakeRoute(size_t i, bool hot) const {
    const SessionRun& s = state_[i];
    const TurnSpec& turn = workload_[i].turns[s.turn];
    RouteRequest r;
    r.session = workload_[i].id;
    r.tenant = "agents";
    r.history_tokens = s.history;
    r.new_tokens = turn.new_tokens;
    // Nothing stored and not hot: the request carries every token to prefill again.
    if (cluster_.reload == ReloadMode::kRecompute && !hot) {
      r.history_tokens = 0;
      r.new_tokens = s.history + turn.new_tokens;
    }
    r.max_output_tokens = 128;
    r.tool = s.turn > 0 ? workload_[i].turns[s.turn - 1].tool : "";
    r.no_wait = true;
    r.arrived = start_ + absl::Seconds(s.requested_at);
    return r;
  }

  bool IsLeased(size_t i) const {
    absl::StatusOr<SessionState> s = svc_->GetSession(workload_[i].id);
    return s.ok() && s->tier == SessionTier::kLeased;
  }

  void Request(size_t i) {
    state_[i].requested_at = now_;
    if (state_[i].turn > 0) {  // the frontend reports the tool call it saw end
      double tool_s = workload_[i].turns[state_[i].turn - 1].tool_s;
      absl::StatusOr<ToolEndResult> t = svc_->ToolCallEnded(workload_[i].id, absl::Seconds(tool_s));
      if (!t.ok()) error_ = t.status();
    }
    bool hot = IsLeased(i);
    int64_t need = static_cast<int64_t>(
        (state_[i].history + workload_[i].turns[state_[i].turn].new_tokens + 128) *
        fig_.kv_bytes_per_token);
    if (need > cluster_.decode_capacity_bytes) {  // can never fit: refused outright
      ++refused_;
      (void)svc_->EndSession(workload_[i].id);
      return;
    }
    if (!hot && !queue_.empty()) {
      queue_.push_back(i);
      return;
    }
    if (!TryStart(i)) queue_.push_back(i);
  }

  // RouteTurn now; false when there is no room (RESOURCE_EXHAUSTED).
  bool TryStart(size_t i) {
    bool leased = IsLeased(i);
    absl::StatusOr<RouteResult> r = svc_->RouteTurn(MakeRoute(i, leased));
    if (!r.ok()) {
      if (!absl::IsResourceExhausted(r.status())) error_ = r.status();
      return false;
    }
    StartTurn(i, *r);
    return true;
  }

  void StartTurn(size_t i, const RouteResult& r) {
    SessionRun& s = state_[i];
    const TurnSpec& turn = workload_[i].turns[s.turn];
    waits_.push_back(now_ - s.requested_at);
    double ready = now_;
    int64_t prefill_tokens = turn.new_tokens;
    if (s.turn > 0) {
      ++later_turns_;
      if (r.hot_hit) {
        ++hot_;
      } else if (cluster_.reload == ReloadMode::kTransfer) {
        ready += s.history * fig_.kv_bytes_per_token / fig_.reload_bytes_per_s;
      } else {
        prefill_tokens += s.history;
      }
    }
    double compute = prefill_tokens / fig_.prefill_tps;
    double prefill_done;
    s.prefill_wait = 0;
    if (r.prefill_on_decode) {
      prefill_done = ready + compute;
    } else {
      int p = std::stoi(r.prefill.id.substr(1));
      double begin = std::max(ready, prefill_free_at_[p]);
      s.prefill_wait = begin - ready;
      prefill_done = begin + compute;
      prefill_free_at_[p] = prefill_done;
      prefill_busy_s_[p] += compute;
      ++prefill_pending_[p];
      Heartbeat(p);
      At(prefill_done, [this, p] {
        --prefill_pending_[p];
        Heartbeat(p);
      });
    }
    ttft_.push_back(prefill_done + 1.0 / fig_.decode_tps - s.requested_at);
    At(prefill_done + turn.out_tokens / fig_.decode_tps, [this, i] { EndTurn(i); });
  }

  void Heartbeat(int p) {
    absl::StatusOr<std::vector<std::string>> hb =
        svc_->Heartbeat(absl::StrFormat("p%d", p), NodeLoad{prefill_pending_[p], 0, 0});
    if (!hb.ok()) error_ = hb.status();
  }

  void EndTurn(size_t i) {
    SessionRun& s = state_[i];
    const SessionSpec& spec = workload_[i];
    const TurnSpec& turn = spec.turns[s.turn];
    s.history += turn.new_tokens + turn.out_tokens;
    if (s.turn + 1 == spec.turns.size()) {
      absl::StatusOr<int> done = svc_->EndSession(spec.id);
      if (!done.ok()) error_ = done.status();
      jct_.push_back(now_ - spec.arrival_s);
    } else {
      absl::StatusOr<LeaseResult> l = svc_->EndTurn(
          {spec.id, s.history, turn.tool, std::nullopt, absl::Seconds(s.prefill_wait)});
      if (!l.ok()) {
        error_ = l.status();
        return;
      }
      if (l->ttl > absl::ZeroDuration()) {
        At(absl::ToDoubleSeconds(l->expires - start_) + 1e-9, [this] {
          svc_->Tick();
          Drain();
        });
      }
      s.turn += 1;
      At(now_ + turn.tool_s, [this, i] { Request(i); });
    }
    Drain();
  }

  // Admits queued turns in order until the head does not fit.
  void Drain() {
    while (!queue_.empty() && error_.ok()) {
      if (!TryStart(queue_.front())) return;
      queue_.pop_front();
    }
  }

  const std::vector<SessionSpec>& workload_;
  const ClusterOptions cluster_;
  const Figures fig_;
  CoordinatorService* const svc_;
  FakeClock* const clock_;
  const absl::Time start_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t seq_ = 0;
  double now_ = 0;
  absl::Status error_;
  std::vector<SessionRun> state_;
  std::deque<size_t> queue_;
  std::vector<double> prefill_free_at_;
  std::vector<int64_t> prefill_pending_;
  std::vector<double> prefill_busy_s_;
  std::vector<double> jct_, ttft_, waits_;
  int64_t hot_ = 0, later_turns_ = 0;
  int refused_ = 0;
};

}  // namespace

absl::StatusOr<Result> Simulate(const std::vector<SessionSpec>& workload,
                                const ClusterOptions& cluster, const Figures& figures,
                                const Policy& policy) {
  CoordinatorOptions o;
  o.kv_bytes_per_token = static_cast<int64_t>(figures.kv_bytes_per_token);
  o.membership.heartbeat_interval = absl::Hours(24 * 365);  // no node dies in the simulation
  o.prefill_on_decode_tokens = cluster.prefill_on_decode_tokens;
  o.demote_under_pressure = cluster.demote_under_pressure;
  o.lease.fixed_ttl = policy.fixed_ttl;
  o.lease.pin_cost = policy.pressure_pin_cost ? PinCost::kPressure : PinCost::kContinuum;
  o.lease.min_samples = policy.min_samples;
  // R(n): the measured cost of bringing n tokens back.
  o.lease.reload.per_token =
      cluster.reload == ReloadMode::kTransfer
          ? absl::Seconds(figures.kv_bytes_per_token / figures.reload_bytes_per_s)
          : absl::Seconds(1.0 / figures.prefill_tps);
  FakeClock clock;
  MemoryStateStore store;
  absl::StatusOr<std::unique_ptr<CoordinatorService>> svc =
      CoordinatorService::Create(o, &clock, &store);
  if (!svc.ok()) return svc.status();
  for (int d = 0; d < cluster.decode_workers; ++d) {
    auto r = (*svc)->RegisterNode({absl::StrFormat("d%d", d), NodeRole::kDecode,
                                   absl::StrFormat("sim:%d", 100 + d), "",
                                   cluster.decode_capacity_bytes, ""});
    if (!r.ok()) return r.status();
  }
  for (int p = 0; p < cluster.prefill_workers; ++p) {
    auto r = (*svc)->RegisterNode({absl::StrFormat("p%d", p), NodeRole::kPrefill,
                                   absl::StrFormat("sim:%d", 200 + p), "", 0, ""});
    if (!r.ok()) return r.status();
  }
  Result result;
  result.policy = policy.name;
  Simulation sim(workload, cluster, figures, svc->get(), &clock, clock.Now());
  RETURN_IF_ERROR(sim.Run(&result));
  return result;
}

absl::StatusOr<Result> SimulateAllHot(const std::vector<SessionSpec>& workload,
                                      const ClusterOptions& cluster, const Figures& figures) {
  ClusterOptions unlimited = cluster;
  unlimited.decode_capacity_bytes = int64_t{1} << 40;
  return Simulate(workload, unlimited, figures,
                  {"bound: every later turn hot, memory unlimited", absl::Hours(24)});
}

}  // namespace glimpse::coordinator::sim
