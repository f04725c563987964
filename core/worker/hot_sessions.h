// The sessions whose KV this decode worker holds in memory (the hot tier), with their token ids, so
// a next turn that extends the same conversation continues without loading anything.
//
// A turn checks its session out (exclusive use while it runs) and returns it at the end. Memory is
// bounded: returning a session that brings the idle copies over the capacity drops the least
// recently used idle sessions (their state is on a cache node already; the coordinator's lease
// only asks the worker to keep them, it cannot make room). A turn that needs room in the KV pool
// (MakeRoom) first re-encodes idle copies whose policy allows it into a smaller format
// (worker::IdleShrinkFormat: int8 and fp8 into kivi4, where that is smaller), least recently used
// first, so that they stay hot as their lease asked; then drops idle copies, least recently used
// first. (Every idle copy is already stored, so dropping before re-encoding would leave nothing to
// re-encode.) Release drops a session when its lease ends; a session released while checked out
// is dropped when it is returned. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/kvstate/state_key.h"
#include "core/model/sequence.h"

namespace glimpse::worker {

struct HotSession {
  std::unique_ptr<model::Sequence> session;
  std::vector<int32_t> tokens;  // the ids whose KV the session holds (next_position() of them)
  kvstate::NamespaceKey namespace_key{};

  int64_t bytes() const { return session ? session->cache().TotalBytes() : 0; }
};

struct HotStats {
  int64_t sessions = 0;
  int64_t bytes = 0;
  int64_t busy = 0;                // checked out by a running turn
  int64_t dropped_for_room = 0;    // idle copies MakeRoom dropped for a turn's KV, since start
  int64_t reencoded_for_room = 0;  // idle copies MakeRoom re-encoded smaller, since start
};

class HotSessions {
 public:
  // `reencode_idle`: MakeRoom may re-encode idle copies smaller before it drops any.
  HotSessions(int64_t capacity_bytes, bool reencode_idle)
      : capacity_bytes_(capacity_bytes), reencode_idle_(reencode_idle) {}

  // The session's hot copy (nullopt when it has none) for exclusive use. While a turn of the same
  // session runs (a client that cancelled a turn and sent the next one), waits up to `wait` for it
  // to end; FailedPrecondition after that.
  absl::StatusOr<std::optional<HotSession>> Checkout(const std::string& id,
                                                     absl::Duration wait = absl::ZeroDuration());
  // Ends the checkout: keeps `session` hot (unless released meanwhile) and makes room.
  void Return(const std::string& id, HotSession session);
  // Ends a checkout whose turn failed: the session has no hot copy any more.
  void Abandon(const std::string& id);
  // Drops the hot copy; returns the bytes freed (0 when it held none; a checked-out session is
  // dropped at Return and counts 0 now).
  int64_t Release(const std::string& id);
  // Until `pool` has `bytes` free under its budget: re-encodes idle hot copies smaller, then drops
  // them, least recently used first, until none is left (a pool without a budget always has room).
  void MakeRoom(const model::KvPool& pool, int64_t bytes);

  HotStats Stats() const;

 private:
  struct Entry {
    std::optional<HotSession> hot;  // empty while checked out or for a new session
    bool busy = false;
    bool released = false;  // release requested during the checkout
    uint64_t last_used = 0;
  };
  void MakeRoomLocked(const std::string& keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MakeRoom's first step: re-encodes idle copies, least recently used first, until room() —
  // unless all of them together would not free `shortfall` bytes (then dropping must make the
  // room anyway, and re-encoding first would only cost time).
  void ShrinkIdleLocked(const std::function<bool()>& room, int64_t shortfall)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t capacity_bytes_;
  const bool reencode_idle_;
  mutable absl::Mutex mu_;
  absl::CondVar returned_;  // a checkout ended
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of the idle hot copies
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_for_room_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reencoded_for_room_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace glimpse::worker
