// StateIndex: the cache node's in-memory view of what the cold tier holds, rebuilt from the
// stored manifests at open and updated after every committed put or delete. It answers three
// questions without touching RocksDB:
//
//   Lookup   the longest stored prefix of a token sequence in a namespace. Per namespace the index
//            keeps the stored prefix lengths (sorted) with the state keys stored at each length.
//            LongestPrefix streams the tokens once through a PrefixHasher (kvstate/state_key.h)
//            and takes the key at each stored length ≤ n: O(n) hashing plus O(L) key
//            finalisations for L stored lengths, never O(n²).
//   Retention which unpinned states a put must displace so the cold tier stays within
//            max_bytes (oldest first, by creation time), and which are older than max_age.
//            When only pinned states are left and the put still does not fit, PlanPut returns
//            ResourceExhausted naming the stored, pinned, incoming and limit byte counts.
//   Totals   states, bytes, pinned bytes (for Stats and metrics).
// Not thread-safe: the service guards it with its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/kvstate/state_key.h"

namespace glimpse::cache_node {

using kvstate::NamespaceKey;
using kvstate::StateKey;

struct StateInfo {
  NamespaceKey ns{};
  uint32_t token_count = 0;
  uint64_t bytes = 0;  // page bytes
  absl::Time created;
  bool pinned = false;
};

struct RetentionLimits {
  absl::Duration max_age = absl::ZeroDuration();  // zero: no age limit
  uint64_t max_bytes = 0;                         // zero: no size limit
};

class StateIndex {
 public:
  // False if `key` is already present (nothing changes).
  bool Add(const StateKey& key, const StateInfo& info);
  bool Remove(const StateKey& key);
  const StateInfo* Find(const StateKey& key) const;
  bool SetPinned(const StateKey& key, bool pinned);

  struct Match {
    StateKey key{};
    uint32_t token_count = 0;
  };
  std::optional<Match> LongestPrefix(const NamespaceKey& ns, std::span<const int32_t> tokens) const;

  // States to delete so that `incoming` more bytes fit beside the stored ones and `reserved`
  // bytes of puts in flight: every unpinned state older than max_age, then the oldest unpinned
  // ones.
  absl::StatusOr<std::vector<StateKey>> PlanPut(uint64_t incoming, uint64_t reserved,
                                                absl::Time now,
                                                const RetentionLimits& limits) const;
  std::vector<StateKey> Expired(absl::Time now, const RetentionLimits& limits) const;

  size_t size() const { return states_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t pinned_bytes() const { return pinned_bytes_; }
  uint64_t pinned_bytes(const NamespaceKey& ns) const;  // of the namespace's pinned states
  size_t pinned_count() const { return pinned_count_; }

 private:
  std::map<StateKey, StateInfo> states_;
  std::map<NamespaceKey, std::map<uint32_t, std::vector<StateKey>>> prefixes_;
  std::set<std::pair<absl::Time, StateKey>> by_age_;  // unpinned and pinned alike
  uint64_t bytes_ = 0;
  // Adds (+1) or removes (−1) a pinned state from the pin totals.
  void CountPin(const StateInfo& info, int sign);
  uint64_t pinned_bytes_ = 0;
  size_t pinned_count_ = 0;
  std::map<NamespaceKey, uint64_t> pinned_by_ns_;  // namespaces with pinned states only
};

}  // namespace glimpse::cache_node
