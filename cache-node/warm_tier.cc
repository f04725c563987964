#include "cache-node/warm_tier.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace glimpse::cache_node {

std::shared_ptr<WarmState> WarmState::Make(kvstate::Manifest manifest,
                                           std::span<const std::span<const uint8_t>> pages) {
  auto w = std::make_shared<WarmState>();
  size_t total = 0;
  for (const auto& p : pages) total += p.size();
  w->data.reset(new uint8_t[total]);  // default-initialised: no memset of what is copied over
  w->offsets.reserve(pages.size() + 1);
  size_t off = 0;
  for (const auto& p : pages) {
    w->offsets.push_back(off);
    std::memcpy(w->data.get() + off, p.data(), p.size());
    off += p.size();
  }
  w->offsets.push_back(off);
  w->manifest = std::move(manifest);
  return w;
}

std::span<const uint8_t> WarmState::page(size_t i) const {
  return {data.get() + offsets[i], offsets[i + 1] - offsets[i]};
}

double WarmState::weight() const {
  if (manifest.pages.empty()) return 0.1;
  double sum = 0;
  for (const kvstate::PageRef& p : manifest.pages) sum += p.importance;
  return 0.1 + 0.9 * (sum / manifest.pages.size());
}

WarmTier::WarmTier(size_t budget_bytes, absl::Duration half_life, Clock* clock)
    : budget_(budget_bytes), half_life_(half_life), clock_(clock) {}

double WarmTier::Score(double weight, absl::Duration idle, absl::Duration half_life) {
  if (half_life <= absl::ZeroDuration()) return weight;
  const double halves = std::max(0.0, absl::FDivDuration(idle, half_life));
  return weight * std::exp2(-halves);
}

std::shared_ptr<const WarmState> WarmTier::Get(const kvstate::StateKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  it->second.last_used = clock_->Now();
  return it->second.state;
}

bool WarmTier::Admit(std::shared_ptr<const WarmState> state) {
  absl::MutexLock lock(&mu_);
  return AdmitLocked(std::move(state), false);
}

bool WarmTier::AdmitPinned(std::shared_ptr<const WarmState> state) {
  absl::MutexLock lock(&mu_);
  return AdmitLocked(std::move(state), true);
}

bool WarmTier::AdmitLocked(std::shared_ptr<const WarmState> state, bool pinned) {
  const absl::Time now = clock_->Now();
  const kvstate::StateKey key = state->manifest.state_key;
  if (auto it = entries_.find(key); it != entries_.end()) {
    it->second.last_used = now;
    it->second.pinned = it->second.pinned || pinned;
    return true;
  }
  const size_t need = state->bytes();
  if (need > budget_) {
    ++stats_.rejected;
    return false;
  }
  if (bytes_ + need > budget_) {
    // Plan first: unpinned entries by ascending score, only those below the newcomer's score
    // (any of them for a pinned admission), until enough room is free.
    const double newcomer = state->weight();
    std::vector<std::pair<double, const kvstate::StateKey*>> candidates;
    for (const auto& [k, e] : entries_) {
      if (e.pinned) continue;
      const double s = Score(e.state->weight(), now - e.last_used, half_life_);
      if (pinned || s < newcomer) candidates.emplace_back(s, &k);
    }
    std::sort(candidates.begin(), candidates.end());
    size_t freed = 0, take = 0;
    while (take < candidates.size() && bytes_ - freed + need > budget_) {
      freed += entries_.at(*candidates[take].second).state->bytes();
      ++take;
    }
    if (bytes_ - freed + need > budget_) {
      ++stats_.rejected;
      return false;
    }
    std::vector<kvstate::StateKey> victims;
    for (size_t i = 0; i < take; ++i) victims.push_back(*candidates[i].second);
    for (const kvstate::StateKey& v : victims) {
      auto it = entries_.find(v);
      bytes_ -= it->second.state->bytes();
      entries_.erase(it);
      ++stats_.evicted;
    }
  }
  bytes_ += need;
  entries_.emplace(key, Entry{std::move(state), now, pinned});
  ++stats_.admitted;
  return true;
}

bool WarmTier::SetPinned(const kvstate::StateKey& key, bool pinned) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  it->second.pinned = pinned;
  return true;
}

void WarmTier::Erase(const kvstate::StateKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  bytes_ -= it->second.state->bytes();
  entries_.erase(it);
}

bool WarmTier::Contains(const kvstate::StateKey& key) const {
  absl::MutexLock lock(&mu_);
  return entries_.count(key) > 0;
}

WarmTier::Stats WarmTier::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.bytes = bytes_;
  s.entries = entries_.size();
  s.pinned_entries = std::count_if(entries_.begin(), entries_.end(),
                                   [](const auto& kv) { return kv.second.pinned; });
  return s;
}

}  // namespace glimpse::cache_node
