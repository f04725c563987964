// LeaseEstimator: how long to keep a session's KV hot on its decode worker after a turn ends,
// while the agent waits for a tool (Continuum, arXiv 2511.02230; REFERENCES.md "Continuum").
//
// For each tool it keeps the most recent observed tool-call durations, an empirical distribution F.
// The lease is
//
//     tau* = argmax over tau in {0} ∪ {observed durations} of  F(tau) · (Q·eta + R(n)) − tau
//
// where F(tau) is the probability the next turn arrives within tau (the hot copy is reused),
// Q the mean queueing delay a reload suffers (measured: the admission wait of turns that were not
// hot, plus their prefill-queue wait when the caller reports it at EndTurn), eta = −corr(turn
// index, turns remaining) over finished sessions (Continuum's η, clamped to [0, 1]), and R(n) the
// reload cost of the session's n kept tokens (fixed + n · per_token, configured from measured
// transport figures). Gain and tau are in seconds; ties go to the shorter tau.
//
// The pin cost: Continuum charges a pinned second as one second (cost weight c = 1): the memory
// could have served a waiting turn. With `PinCost::kPressure` (the default) c is the probability
// that a pinned second makes someone wait, estimated from recent admissions:
//   - leases that cannot be demoted (`reclaimable` false): c = the share of the last
//     `pressure_window` admissions that waited for memory or were refused, at least `min_pin_cost`
//     (≈ 3 / 256, the rule-of-three upper bound on a share never seen in 256 admissions: a lease
//     is a commitment, so it is priced pessimistically);
//   - leases that are demoted when memory is needed (`reclaimable`, the coordinator's default):
//     no admission ever waits for a lease's memory (the planner demotes it first), so the count
//     of such waits is 0 by construction and c is its Jeffreys posterior mean, ½ / (W + 1) over
//     the W admissions in the window (0.5 before any, 0.0019 at W = 256). The victim's own loss
//     is already priced by F (and by the demotion order, value per byte-second).
//
//     tau* = argmax over tau of  F(tau) · (Q·eta + R(n)) − c · tau
//
// Tools are scoped per tenant (one tenant's reports never shape another's leases; the pooled
// distribution below is every tenant's) and bounded, since tenants name them: at most
// `max_tools_per_tenant` per tenant and `max_tools` in all, the least recently observed going
// first.
//
// Fallbacks, in order, while a tool has fewer than `min_samples` samples (Continuum uses 100): a
// client hint (a point mass at hint · hint_slack: pin for it when the gain exceeds it, else 0);
// the pooled distribution of all tools; then, with no distribution at all, `default_ttl`, except
// with `PinCost::kPressure` and reclaimable leases: the break-even lease G / c (ski rental, Karlin
// et al. 1988: renting until the rent paid equals the purchase price G costs at most twice the
// best choice in hindsight, whatever the durations are; a lease that can be cut at any time is
// such a rental). Not for leases that cannot be demoted: those are commitments, and c, measured
// from waits after the fact, would price them too late. tau never exceeds `max_ttl`.
//
// Not thread-safe: the owner (CoordinatorService) serialises calls.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace glimpse::coordinator {

// R(n) is measured: callers report what reloading a session actually cost (a decode worker's load
// time for a warm turn, with the tokens it reloaded, EndTurn.reload_seconds); once
// `min_reload_samples` of the last `reload_window` reports exist, R(n) = a + b·n fitted to them by
// least squares (a, b >= 0). Before that, the configured `reload` = fixed + n · per_token.
// Default per_token: 23,850 KV bytes per token (SmolLM2-135M fp16 pages) at 1.18 GB/s (a cold
// cache-node get: RocksDB read and UCX transfer to another process, bench/RESULTS.md "Cache node")
// = 20.2 µs — bytes alone, which a real reload exceeds (RPCs, page decoding), hence the
// measurement.
struct ReloadCost {
  absl::Duration fixed = absl::ZeroDuration();
  absl::Duration per_token = absl::Nanoseconds(20'212);
  absl::Duration Of(int64_t tokens) const { return fixed + per_token * tokens; }
};

enum class PinCost { kContinuum, kPressure };

// A tool as its tenant names it.
struct ToolKey {
  std::string tenant;
  std::string tool;
  auto operator<=>(const ToolKey&) const = default;
};

struct LeaseEstimatorOptions {
  int min_samples = 100;
  int max_samples = 1000;  // per tool (and pooled): the most recent are kept
  int max_tools = 4096;
  int max_tools_per_tenant = 64;
  absl::Duration default_ttl = absl::Seconds(2);
  absl::Duration max_ttl = absl::Minutes(10);
  double hint_slack = 1.2;
  double default_eta = 1.0;
  int min_sessions_for_eta = 20;
  absl::Duration default_queue_delay = absl::ZeroDuration();  // Q before any observation
  int queue_window = 256;  // Q = mean of the last this many reload admission waits
  ReloadCost reload;
  int min_reload_samples = 3;  // reported reloads before R(n) is fitted to them
  int reload_window = 64;      // the most recent reports are kept
  // Set: every lease is this tau (source "fixed"), the estimator only records. For operators who
  // want a fixed TTL and for the simulator's baselines (0 = evict at turn end).
  std::optional<absl::Duration> fixed_ttl;
  PinCost pin_cost = PinCost::kPressure;
  double min_pin_cost = 0.01;  // c's floor when leases are not reclaimable
  int pressure_window = 256;   // admissions the pressure share is measured over
  // Leases are demoted when a turn needs their memory (CoordinatorOptions::demote_under_pressure,
  // copied by CoordinatorService): the pin cost and the no-data fallback then follow (see above).
  bool reclaimable = true;
};

struct TtlDecision {
  absl::Duration ttl = absl::ZeroDuration();
  std::string source;  // "estimator" | "hint" | "pooled" | "break-even" | "default", "+capped"
  double reuse_probability = 0;  // F(ttl) under the distribution used (hint: 1 or 0)
  double gain_s = 0;             // Q·eta + R(n)
  double pin_cost = 1;           // c
  int samples = 0;
};

// The argmax over {0} ∪ samples of F(tau)·gain − cost·tau for sorted samples (seconds),
// restricted to tau <= max_s. Returns {tau, F(tau)}.
struct ArgmaxResult {
  double tau_s = 0;
  double f = 0;
  bool capped = false;
};
ArgmaxResult ArgmaxTtl(const std::vector<double>& sorted_samples_s, double gain_s, double max_s,
                       double cost = 1.0);

// R(n) = fixed + per_token · n fitted to (tokens, seconds) points by least squares, both >= 0.
struct ReloadFit {
  double fixed_s = 0;
  double per_token_s = 0;
};
ReloadFit FitReloads(const std::deque<std::pair<double, double>>& points);

// Continuum's eta from a histogram {turns per session -> sessions}: −corr(i, N − i) over every
// turn i = 1..N of every session; nullopt when undefined (no variance).
std::optional<double> EtaFromTurnHistogram(const std::map<int, int64_t>& sessions_by_turns);

class LeaseEstimator {
 public:
  explicit LeaseEstimator(LeaseEstimatorOptions options) : options_(options) {}

  void ObserveToolDuration(const ToolKey& tool, absl::Duration d);
  void ObserveQueueDelay(absl::Duration d);
  // How long a reload's prefill waited in its prefill worker's queue (reported at EndTurn).
  void ObservePrefillQueueDelay(absl::Duration d);
  void ObserveSessionEnd(int turns);
  // One admission: `pressured` when it waited for memory or was refused.
  void ObserveAdmission(bool pressured);
  // What reloading `tokens` tokens of a session cost (measured by the worker that did it).
  void ObserveReload(int64_t tokens, absl::Duration took);

  TtlDecision Choose(const ToolKey& tool, int64_t kv_tokens,
                     std::optional<absl::Duration> hint) const;
  // P(next turn arrives by `lease_end` | it has not arrived after `elapsed`), from the tool's
  // distribution (or pooled); `fallback` when neither has enough samples.
  double ReuseProbability(const ToolKey& tool, absl::Duration elapsed, absl::Duration lease_end,
                          double fallback) const;
  // E[min(T, lease_end) − elapsed | T > elapsed] for the next turn's arrival T: how much longer
  // a lease `elapsed` into its pause is expected to hold its memory (until the turn comes or the
  // lease ends). lease_end − elapsed when the tool has no distribution (nor pooled) or no
  // sample exceeds `elapsed`.
  absl::Duration ExpectedHold(const ToolKey& tool, absl::Duration elapsed,
                              absl::Duration lease_end) const;

  // Q = mean admission wait of reloads (default_queue_delay before any) + mean prefill-queue
  // wait of reloads (0 before any report).
  absl::Duration QueueDelay() const;
  double Eta() const;
  double PinCostWeight() const;  // c (1 with PinCost::kContinuum)
  // R(n): fitted to the reported reloads, or the configured cost before there are enough.
  absl::Duration ReloadCostOf(int64_t tokens) const;
  const LeaseEstimatorOptions& options() const { return options_; }

  // For Stats and persistence.
  struct ToolSummary {
    ToolKey tool;
    int samples;
    absl::Duration median;
  };
  std::vector<ToolSummary> Tools() const;
  std::string SerializeToJson() const;
  absl::Status RestoreFromJson(const std::string& json);

 private:
  struct Samples {
    std::deque<double> recent;           // seconds, oldest first
    mutable std::vector<double> sorted;  // cache of `recent`, sorted
    mutable std::vector<double> prefix;  // prefix[i] = sorted[0] + ... + sorted[i - 1]
    mutable bool dirty = true;
    uint64_t last_observed = 0;  // LeaseEstimator::observations_ when last added to
    void Add(double s, int max);
    const std::vector<double>& Sorted() const;
  };
  const Samples* DistributionFor(const ToolKey& tool) const;
  // The samples of `tool`, made room for within the bounds when new.
  Samples& SamplesOf(const ToolKey& tool);

  const LeaseEstimatorOptions options_;
  std::map<ToolKey, Samples> tools_;
  uint64_t observations_ = 0;
  Samples pooled_;
  std::deque<double> queue_delays_s_;
  double queue_delay_sum_s_ = 0;
  std::deque<double> prefill_delays_s_;
  double prefill_delay_sum_s_ = 0;
  std::map<int, int64_t> sessions_by_turns_;
  std::deque<bool> admissions_;  // recent admissions, true = pressured
  int pressured_ = 0;
  std::deque<std::pair<double, double>> reloads_;  // (tokens, seconds), oldest first
};

}  // namespace glimpse::coordinator
