#include "coordinator/lease_estimator.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace glimpse::coordinator {

ArgmaxResult ArgmaxTtl(const std::vector<double>& sorted, double gain_s, double max_s,
                       double cost) {
  ArgmaxResult best;  // tau = 0: F(0) · gain − 0 with F(0) = P(d <= 0), durations are > 0
  double best_value = 0;
  const double n = static_cast<double>(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) {
    // F(tau) at a sample counts every sample <= it: evaluate at the last of equal values.
    if (i + 1 < sorted.size() && sorted[i + 1] == sorted[i]) continue;
    double tau = sorted[i];
    double f = static_cast<double>(i + 1) / n;
    double value = f * gain_s - cost * tau;
    if (value > best_value) {
      if (tau > max_s) {
        best.capped = true;
        continue;
      }
      best_value = value;
      best.tau_s = tau;
      best.f = f;
    }
  }
  return best;
}

std::optional<double> EtaFromTurnHistogram(const std::map<int, int64_t>& sessions_by_turns) {
  // Sums over i = 1..N of x = i and y = N − i, in closed form, weighted by sessions.
  double cnt = 0, sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  for (const auto& [turns, sessions] : sessions_by_turns) {
    if (turns <= 0 || sessions <= 0) continue;
    double N = turns, w = static_cast<double>(sessions);
    double si = N * (N + 1) / 2, sii = N * (N + 1) * (2 * N + 1) / 6;
    double sj = N * (N - 1) / 2, sjj = (N - 1) * N * (2 * N - 1) / 6;
    cnt += w * N;
    sx += w * si;
    sy += w * sj;
    sxx += w * sii;
    syy += w * sjj;
    sxy += w * (N * si - sii);
  }
  if (cnt < 2) return std::nullopt;
  double vx = sxx / cnt - (sx / cnt) * (sx / cnt);
  double vy = syy / cnt - (sy / cnt) * (sy / cnt);
  if (vx <= 1e-12 || vy <= 1e-12) return std::nullopt;
  double cov = sxy / cnt - (sx / cnt) * (sy / cnt);
  return -cov / std::sqrt(vx * vy);
}

void LeaseEstimator::Samples::Add(double s, int max) {
  recent.push_back(s);
  while (static_cast<int>(recent.size()) > max) recent.pop_front();
  dirty = true;
}

const std::vector<double>& LeaseEstimator::Samples::Sorted() const {
  if (dirty) {
    sorted.assign(recent.begin(), recent.end());
    std::sort(sorted.begin(), sorted.end());
    prefix.assign(sorted.size() + 1, 0.0);
    for (size_t i = 0; i < sorted.size(); ++i) prefix[i + 1] = prefix[i] + sorted[i];
    dirty = false;
  }
  return sorted;
}

void LeaseEstimator::ObserveToolDuration(const ToolKey& tool, absl::Duration d) {
  double s = std::max(0.0, absl::ToDoubleSeconds(d));
  Samples& samples = SamplesOf(tool);
  samples.Add(s, options_.max_samples);
  samples.last_observed = ++observations_;
  pooled_.Add(s, options_.max_samples);
}

LeaseEstimator::Samples& LeaseEstimator::SamplesOf(const ToolKey& tool) {
  if (auto it = tools_.find(tool); it != tools_.end()) return it->second;
  // The least recently observed of the tenant's tools when it has its share, else of all tools
  // when they are at the bound.
  auto least_recent = [&](bool same_tenant) {
    auto victim = tools_.end();
    int count = 0;
    for (auto it = tools_.begin(); it != tools_.end(); ++it) {
      if (same_tenant && it->first.tenant != tool.tenant) continue;
      ++count;
      if (victim == tools_.end() || it->second.last_observed < victim->second.last_observed) {
        victim = it;
      }
    }
    return std::pair(victim, count);
  };
  if (auto [victim, count] = least_recent(true);
      count >= options_.max_tools_per_tenant && victim != tools_.end()) {
    tools_.erase(victim);
  } else if (static_cast<int>(tools_.size()) >= options_.max_tools && !tools_.empty()) {
    tools_.erase(least_recent(false).first);
  }
  return tools_[tool];
}

void LeaseEstimator::ObserveQueueDelay(absl::Duration d) {
  double s = std::max(0.0, absl::ToDoubleSeconds(d));
  queue_delays_s_.push_back(s);
  queue_delay_sum_s_ += s;
  while (static_cast<int>(queue_delays_s_.size()) > options_.queue_window) {
    queue_delay_sum_s_ -= queue_delays_s_.front();
    queue_delays_s_.pop_front();
  }
}

void LeaseEstimator::ObserveSessionEnd(int turns) {
  if (turns > 0) ++sessions_by_turns_[turns];
}

void LeaseEstimator::ObserveAdmission(bool pressured) {
  admissions_.push_back(pressured);
  pressured_ += pressured;
  while (static_cast<int>(admissions_.size()) > options_.pressure_window) {
    pressured_ -= admissions_.front();
    admissions_.pop_front();
  }
}

double LeaseEstimator::PinCostWeight() const {
  if (options_.pin_cost == PinCost::kContinuum) return 1.0;
  // Reclaimable leases: no admission waits for their memory, so 0 of W waited; Jeffreys' mean.
  if (options_.reclaimable) return 0.5 / (static_cast<double>(admissions_.size()) + 1.0);
  double share = admissions_.empty() ? 0.0 : static_cast<double>(pressured_) / admissions_.size();
  return std::max(options_.min_pin_cost, share);
}

void LeaseEstimator::ObservePrefillQueueDelay(absl::Duration d) {
  double s = std::max(0.0, absl::ToDoubleSeconds(d));
  prefill_delays_s_.push_back(s);
  prefill_delay_sum_s_ += s;
  while (static_cast<int>(prefill_delays_s_.size()) > options_.queue_window) {
    prefill_delay_sum_s_ -= prefill_delays_s_.front();
    prefill_delays_s_.pop_front();
  }
}

absl::Duration LeaseEstimator::QueueDelay() const {
  absl::Duration admission =
      queue_delays_s_.empty()
          ? options_.default_queue_delay
          : absl::Seconds(std::max(0.0, queue_delay_sum_s_ / queue_delays_s_.size()));
  absl::Duration prefill =
      prefill_delays_s_.empty()
          ? absl::ZeroDuration()
          : absl::Seconds(std::max(0.0, prefill_delay_sum_s_ / prefill_delays_s_.size()));
  return admission + prefill;
}

double LeaseEstimator::Eta() const {
  int64_t sessions = 0;
  for (const auto& [t, n] : sessions_by_turns_) sessions += n;
  if (sessions < options_.min_sessions_for_eta) return options_.default_eta;
  std::optional<double> eta = EtaFromTurnHistogram(sessions_by_turns_);
  if (!eta) return options_.default_eta;
  return std::clamp(*eta, 0.0, 1.0);
}

const LeaseEstimator::Samples* LeaseEstimator::DistributionFor(const ToolKey& tool) const {
  auto it = tools_.find(tool);
  if (it != tools_.end() && static_cast<int>(it->second.recent.size()) >= options_.min_samples) {
    return &it->second;
  }
  if (static_cast<int>(pooled_.recent.size()) >= options_.min_samples) return &pooled_;
  return nullptr;
}

TtlDecision LeaseEstimator::Choose(const ToolKey& tool, int64_t kv_tokens,
                                   std::optional<absl::Duration> hint) const {
  TtlDecision d;
  d.gain_s =
      absl::ToDoubleSeconds(QueueDelay()) * Eta() + absl::ToDoubleSeconds(ReloadCostOf(kv_tokens));
  d.pin_cost = PinCostWeight();
  const double max_s = absl::ToDoubleSeconds(options_.max_ttl);
  if (options_.fixed_ttl.has_value()) {
    d.ttl = *options_.fixed_ttl;
    d.source = "fixed";
    return d;
  }
  auto it = tools_.find(tool);
  int tool_samples = it == tools_.end() ? 0 : static_cast<int>(it->second.recent.size());
  const Samples* dist = nullptr;
  if (tool_samples >= options_.min_samples) {
    dist = &it->second;
    d.source = "estimator";
  } else if (hint.has_value()) {
    double tau = absl::ToDoubleSeconds(*hint) * options_.hint_slack;
    bool worth = d.gain_s - d.pin_cost * tau > 0;
    bool capped = worth && tau > max_s;
    d.ttl = worth && !capped ? absl::Seconds(tau) : absl::ZeroDuration();
    d.reuse_probability = worth && !capped ? 1.0 : 0.0;
    d.source = capped ? "hint+capped" : "hint";
    d.samples = tool_samples;
    return d;
  } else if (static_cast<int>(pooled_.recent.size()) >= options_.min_samples) {
    dist = &pooled_;
    d.source = "pooled";
  } else {
    d.samples = tool_samples;
    // Break-even (ski rental): pinning longer than G / c cannot pay back even if the turn comes.
    absl::Duration break_even =
        d.pin_cost > 0 ? absl::Seconds(d.gain_s / d.pin_cost) : absl::InfiniteDuration();
    const bool rental = options_.pin_cost == PinCost::kPressure && options_.reclaimable;
    absl::Duration fallback = rental ? break_even : options_.default_ttl;
    d.ttl = std::min(fallback, options_.max_ttl);
    d.source = rental ? "break-even" : "default";
    if (fallback > options_.max_ttl) d.source += "+capped";
    return d;
  }
  const std::vector<double>& sorted = dist->Sorted();
  ArgmaxResult r = ArgmaxTtl(sorted, d.gain_s, max_s, d.pin_cost);
  d.ttl = absl::Seconds(r.tau_s);
  d.reuse_probability = r.f;
  d.samples = static_cast<int>(sorted.size());
  if (r.capped) d.source += "+capped";
  return d;
}

double LeaseEstimator::ReuseProbability(const ToolKey& tool, absl::Duration elapsed,
                                        absl::Duration lease_end, double fallback) const {
  const Samples* dist = DistributionFor(tool);
  if (dist == nullptr) return fallback;
  const std::vector<double>& s = dist->Sorted();
  auto cdf = [&](double x) {
    return static_cast<double>(std::upper_bound(s.begin(), s.end(), x) - s.begin()) / s.size();
  };
  double f_elapsed = cdf(absl::ToDoubleSeconds(elapsed));
  double f_end = cdf(absl::ToDoubleSeconds(lease_end));
  if (f_elapsed >= 1.0) return 0.0;
  return std::clamp((f_end - f_elapsed) / (1.0 - f_elapsed), 0.0, 1.0);
}

absl::Duration LeaseEstimator::ExpectedHold(const ToolKey& tool, absl::Duration elapsed,
                                            absl::Duration lease_end) const {
  const absl::Duration rest = std::max(absl::ZeroDuration(), lease_end - elapsed);
  const Samples* dist = DistributionFor(tool);
  if (dist == nullptr) return rest;
  const std::vector<double>& s = dist->Sorted();
  const double e = absl::ToDoubleSeconds(elapsed);
  const double end = std::max(e, absl::ToDoubleSeconds(lease_end));
  const size_t first = std::upper_bound(s.begin(), s.end(), e) - s.begin();   // T > elapsed
  const size_t past = std::upper_bound(s.begin(), s.end(), end) - s.begin();  // T > lease_end
  if (first == s.size()) return rest;
  // Samples in (e, end] hold until they arrive; later ones until the lease ends.
  const double arriving = dist->prefix[past] - dist->prefix[first] - e * (past - first);
  const double held_to_end = (end - e) * (s.size() - past);
  return absl::Seconds((arriving + held_to_end) / (s.size() - first));
}

std::vector<LeaseEstimator::ToolSummary> LeaseEstimator::Tools() const {
  std::vector<ToolSummary> out;
  for (const auto& [name, samples] : tools_) {
    const std::vector<double>& s = samples.Sorted();
    absl::Duration median = s.empty() ? absl::ZeroDuration() : absl::Seconds(s[s.size() / 2]);
    out.push_back({name, static_cast<int>(s.size()), median});
  }
  return out;
}

void LeaseEstimator::ObserveReload(int64_t tokens, absl::Duration took) {
  reloads_.emplace_back(static_cast<double>(std::max<int64_t>(tokens, 0)),
                        std::max(0.0, absl::ToDoubleSeconds(took)));
  while (static_cast<int>(reloads_.size()) > options_.reload_window) reloads_.pop_front();
}

absl::Duration LeaseEstimator::ReloadCostOf(int64_t tokens) const {
  if (static_cast<int>(reloads_.size()) < options_.min_reload_samples) {
    return options_.reload.Of(tokens);
  }
  const ReloadFit fit = FitReloads(reloads_);
  return absl::Seconds(fit.fixed_s + fit.per_token_s * static_cast<double>(tokens));
}

ReloadFit FitReloads(const std::deque<std::pair<double, double>>& points) {
  const double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double var = sxx - sx * sx / n;
  ReloadFit fit;
  if (var > 0) {
    fit.per_token_s = (sxy - sx * sy / n) / var;
    fit.fixed_s = (sy - fit.per_token_s * sx) / n;
  } else {
    fit.fixed_s = sy / n;  // one size only: a constant cost
  }
  // Costs are never negative: clamp a coefficient to 0 and refit the other alone.
  if (fit.per_token_s < 0) {
    fit = {sy / n, 0.0};
  } else if (fit.fixed_s < 0) {
    fit = {0.0, sxx > 0 ? sxy / sxx : 0.0};
  }
  return fit;
}

std::string LeaseEstimator::SerializeToJson() const {
  nlohmann::json j;
  j["version"] = 2;
  nlohmann::json tools = nlohmann::json::array();  // [tenant, tool, samples], oldest observed first
  std::vector<const std::pair<const ToolKey, Samples>*> by_age;
  for (const auto& entry : tools_) by_age.push_back(&entry);
  std::sort(by_age.begin(), by_age.end(), [](const auto* x, const auto* y) {
    return x->second.last_observed < y->second.last_observed;
  });
  for (const auto* entry : by_age) {
    const Samples& samples = entry->second;
    tools.push_back({entry->first.tenant, entry->first.tool,
                     std::vector<double>(samples.recent.begin(), samples.recent.end())});
  }
  j["tools"] = tools;
  j["pooled"] = std::vector<double>(pooled_.recent.begin(), pooled_.recent.end());
  j["queue_delays_s"] = std::vector<double>(queue_delays_s_.begin(), queue_delays_s_.end());
  j["prefill_delays_s"] = std::vector<double>(prefill_delays_s_.begin(), prefill_delays_s_.end());
  nlohmann::json turns = nlohmann::json::array();
  for (const auto& [t, n] : sessions_by_turns_) turns.push_back({t, n});
  j["sessions_by_turns"] = turns;
  nlohmann::json reloads = nlohmann::json::array();
  for (const auto& [tokens, seconds] : reloads_) reloads.push_back({tokens, seconds});
  j["reloads"] = reloads;
  return j.dump();
}

absl::Status LeaseEstimator::RestoreFromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const int version = j.is_object() ? j.value("version", 0) : 0;
  if (j.is_discarded() || (version != 1 && version != 2)) {
    return absl::DataLossError("estimator state: not a version-1 or version-2 JSON object");
  }
  try {
    // Version 1 named tools without tenants: they come back as the tools of tenant "".
    std::vector<std::pair<ToolKey, std::vector<double>>> stored;
    if (version == 1) {
      for (const auto& [name, arr] : j.at("tools").items()) {
        stored.push_back({{"", name}, arr.get<std::vector<double>>()});
      }
    } else {
      for (const auto& t : j.at("tools")) {
        stored.push_back({{t.at(0).get<std::string>(), t.at(1).get<std::string>()},
                          t.at(2).get<std::vector<double>>()});
      }
    }
    Samples pooled;
    for (double s : j.at("pooled").get<std::vector<double>>()) pooled.Add(s, options_.max_samples);
    std::deque<double> q;
    double qsum = 0;
    for (double s : j.at("queue_delays_s").get<std::vector<double>>()) {
      q.push_back(s);
      qsum += s;
    }
    std::deque<double> pq;
    double pqsum = 0;
    for (double s : j.value("prefill_delays_s", std::vector<double>{})) {
      pq.push_back(s);
      pqsum += s;
    }
    std::map<int, int64_t> turns;
    for (const auto& p : j.at("sessions_by_turns"))
      turns[p.at(0).get<int>()] = p.at(1).get<int64_t>();
    std::deque<std::pair<double, double>> reloads;
    for (const auto& p : j.value("reloads", nlohmann::json::array())) {
      reloads.emplace_back(p.at(0).get<double>(), p.at(1).get<double>());
    }
    tools_.clear();
    observations_ = 0;
    for (const auto& [key, samples] : stored) {  // oldest first: the bounds keep the newest
      Samples& into = SamplesOf(key);
      for (double s : samples) into.Add(s, options_.max_samples);
      into.last_observed = ++observations_;
    }
    pooled_ = std::move(pooled);
    queue_delays_s_ = std::move(q);
    queue_delay_sum_s_ = qsum;
    prefill_delays_s_ = std::move(pq);
    prefill_delay_sum_s_ = pqsum;
    sessions_by_turns_ = std::move(turns);
    reloads_ = std::move(reloads);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrFormat("estimator state: %s", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace glimpse::coordinator
