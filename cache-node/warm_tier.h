// WarmTier: the cache node's in-memory tier, whole states (manifest + page bytes) under a byte
// budget. Not LRU: every entry has a value
//
//     score = w · 2^(−idle / half_life),   w = 0.1 + 0.9 · mean page importance ∈ [0.1, 1]
//
// where idle is the time since the entry was last read or stored (Clock), and importance is the
// manifest's per-page keep score in [0, 1]. A state that the eviction policy valued (retained,
// high-scoring pages) therefore outlives a colder, less valued one of the same age, while anything
// unused for many half-lives fades out. The 0.1 floor keeps all-evicted states (importance 0)
// cacheable while they are fresh.
//
// Admission: an entry that does not fit evicts unpinned entries in ascending score order, but
// only entries whose score is below the newcomer's (w, as idle = 0); if that cannot free enough
// room nothing is evicted and the newcomer is not admitted. A pinned admission (AdmitPinned)
// evicts any unpinned entries it needs. Pinned entries are never evicted; Erase removes any entry.
// Cost: O(entries) per admission that needs room (scores decay, so no static order exists).
// Thread-safe (one mutex); entries are immutable and shared, so a reader keeps its copy alive
// while shipping it even if the entry is evicted meanwhile.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/common/clock.h"
#include "core/kvstate/manifest.h"

namespace glimpse::cache_node {

// A state in memory: its pages packed back to back in manifest order, ready to ship as one
// buffer. Immutable once made.
struct WarmState {
  kvstate::Manifest manifest;
  // All pages, concatenated (not value-initialised: Make fills every byte).
  std::unique_ptr<uint8_t[]> data;
  std::vector<size_t> offsets;  // [pages + 1]: page i is data[offsets[i], offsets[i + 1])

  // Copies `pages` (in manifest order) into a new entry.
  static std::shared_ptr<WarmState> Make(kvstate::Manifest manifest,
                                         std::span<const std::span<const uint8_t>> pages);
  std::span<const uint8_t> page(size_t i) const;
  std::span<const uint8_t> packed() const { return {data.get(), bytes()}; }
  size_t bytes() const { return offsets.empty() ? 0 : offsets.back(); }  // the budgeted size
  double weight() const;                                                 // w above
};

class WarmTier {
 public:
  WarmTier(size_t budget_bytes, absl::Duration half_life, Clock* clock);

  // The entry, and marks it used; nullptr (a miss) if absent.
  std::shared_ptr<const WarmState> Get(const kvstate::StateKey& key);
  // True if admitted (or already present). Pinned entries stay until unpinned.
  bool Admit(std::shared_ptr<const WarmState> state);
  bool AdmitPinned(std::shared_ptr<const WarmState> state);
  // Marks an entry (un)pinned; false if absent.
  bool SetPinned(const kvstate::StateKey& key, bool pinned);
  void Erase(const kvstate::StateKey& key);
  bool Contains(const kvstate::StateKey& key) const;

  static double Score(double weight, absl::Duration idle, absl::Duration half_life);

  struct Stats {
    uint64_t hits = 0, misses = 0, admitted = 0, rejected = 0, evicted = 0;
    uint64_t bytes = 0, entries = 0, pinned_entries = 0;
  };
  Stats stats() const;
  size_t budget_bytes() const { return budget_; }

 private:
  struct Entry {
    std::shared_ptr<const WarmState> state;
    absl::Time last_used;
    bool pinned = false;
  };
  bool AdmitLocked(std::shared_ptr<const WarmState> state, bool pinned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t budget_;             // Constant after construction.
  const absl::Duration half_life_;  // Constant after construction.
  Clock* const clock_;              // Not owned.
  mutable absl::Mutex mu_;
  std::map<kvstate::StateKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glimpse::cache_node
