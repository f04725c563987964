#include "cache-node/state_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace glimpse::cache_node {

bool StateIndex::Add(const StateKey& key, const StateInfo& info) {
  if (!states_.emplace(key, info).second) return false;
  prefixes_[info.ns][info.token_count].push_back(key);
  by_age_.emplace(info.created, key);
  bytes_ += info.bytes;
  if (info.pinned) CountPin(info, +1);
  return true;
}

void StateIndex::CountPin(const StateInfo& info, int sign) {
  if (sign > 0) {
    pinned_bytes_ += info.bytes;
    ++pinned_count_;
    pinned_by_ns_[info.ns] += info.bytes;
    return;
  }
  pinned_bytes_ -= info.bytes;
  --pinned_count_;
  auto it = pinned_by_ns_.find(info.ns);
  if ((it->second -= info.bytes) == 0) pinned_by_ns_.erase(it);
}

uint64_t StateIndex::pinned_bytes(const NamespaceKey& ns) const {
  auto it = pinned_by_ns_.find(ns);
  return it == pinned_by_ns_.end() ? 0 : it->second;
}

bool StateIndex::Remove(const StateKey& key) {
  auto it = states_.find(key);
  if (it == states_.end()) return false;
  const StateInfo& info = it->second;
  auto ns = prefixes_.find(info.ns);
  auto len = ns->second.find(info.token_count);
  std::erase(len->second, key);
  if (len->second.empty()) ns->second.erase(len);
  if (ns->second.empty()) prefixes_.erase(ns);
  by_age_.erase({info.created, key});
  bytes_ -= info.bytes;
  if (info.pinned) CountPin(info, -1);
  states_.erase(it);
  return true;
}

const StateInfo* StateIndex::Find(const StateKey& key) const {
  auto it = states_.find(key);
  return it == states_.end() ? nullptr : &it->second;
}

bool StateIndex::SetPinned(const StateKey& key, bool pinned) {
  auto it = states_.find(key);
  if (it == states_.end()) return false;
  if (it->second.pinned != pinned) {
    it->second.pinned = pinned;
    CountPin(it->second, pinned ? +1 : -1);
  }
  return true;
}

std::optional<StateIndex::Match> StateIndex::LongestPrefix(const NamespaceKey& ns,
                                                           std::span<const int32_t> tokens) const {
  auto it = prefixes_.find(ns);
  if (it == prefixes_.end()) return std::nullopt;
  std::optional<Match> best;
  kvstate::PrefixHasher hasher(ns);
  for (const auto& [len, keys] : it->second) {  // ascending lengths
    if (len > tokens.size()) break;
    hasher.Append(tokens.subspan(hasher.tokens(), len - hasher.tokens()));
    const StateKey key = hasher.Key();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) best = Match{key, len};
  }
  return best;
}

std::vector<StateKey> StateIndex::Expired(absl::Time now, const RetentionLimits& limits) const {
  std::vector<StateKey> out;
  if (limits.max_age <= absl::ZeroDuration()) return out;
  for (const auto& [created, key] : by_age_) {
    if (now - created <= limits.max_age) break;
    if (!states_.at(key).pinned) out.push_back(key);
  }
  return out;
}

absl::StatusOr<std::vector<StateKey>> StateIndex::PlanPut(uint64_t incoming, uint64_t reserved,
                                                          absl::Time now,
                                                          const RetentionLimits& limits) const {
  std::vector<StateKey> victims = Expired(now, limits);
  if (limits.max_bytes == 0) return victims;
  uint64_t freed = 0;
  for (const StateKey& k : victims) freed += states_.at(k).bytes;
  const auto fits = [&] { return bytes_ - freed + reserved + incoming <= limits.max_bytes; };
  for (auto it = by_age_.begin(); it != by_age_.end() && !fits(); ++it) {
    const StateInfo& info = states_.at(it->second);
    if (info.pinned) continue;
    if (limits.max_age > absl::ZeroDuration() && now - it->first > limits.max_age) continue;
    victims.push_back(it->second);
    freed += info.bytes;
  }
  if (!fits()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cold store full: a put of ", incoming, " bytes does not fit in retention.max_bytes ",
        limits.max_bytes, " (", bytes_, " bytes stored, of which ", pinned_bytes_,
        " pinned and cannot be dropped; ", reserved, " bytes of puts in flight)"));
  }
  return victims;
}

}  // namespace glimpse::cache_node
