#include "decode-worker/hot_sessions.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace glimpse::decode_worker {

absl::StatusOr<std::optional<HotSession>> HotSessions::Checkout(const std::string& id,
                                                                absl::Duration wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = absl::ToChronoTime(absl::Now() + wait);
  auto busy = [&] {
    auto it = entries_.find(id);
    return it != entries_.end() && it->second.busy;
  };
  if (!returned_.wait_until(lock, deadline, [&] { return !busy(); })) {
    return absl::FailedPreconditionError(absl::StrCat("a turn of session ", id,
                                                      " is still running on this worker after ",
                                                      absl::FormatDuration(wait)));
  }
  Entry& e = entries_[id];
  e.busy = true;
  e.released = false;
  std::optional<HotSession> out = std::move(e.hot);
  e.hot.reset();
  if (out) bytes_ -= out->bytes();
  return out;
}

void HotSessions::Return(const std::string& id, HotSession session) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[id];
  if (e.released) {
    entries_.erase(id);
    returned_.notify_all();
    return;
  }
  e.busy = false;
  returned_.notify_all();
  e.last_used = ++clock_;
  bytes_ += session.bytes();
  e.hot = std::move(session);
  MakeRoomLocked(id);
}

void HotSessions::Abandon(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(id);
  returned_.notify_all();
}

int64_t HotSessions::Release(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return 0;
  if (it->second.busy) {
    it->second.released = true;
    return 0;
  }
  const int64_t freed = it->second.hot ? it->second.hot->bytes() : 0;
  bytes_ -= freed;
  entries_.erase(it);
  return freed;
}

void HotSessions::MakeRoomLocked(const std::string& keep) {
  while (bytes_ > capacity_bytes_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == keep || it->second.busy || !it->second.hot) continue;
      if (victim == entries_.end() || it->second.last_used < victim->second.last_used) victim = it;
    }
    if (victim == entries_.end()) return;  // only the newest session is left: keep it
    bytes_ -= victim->second.hot->bytes();
    entries_.erase(victim);
  }
}

void HotSessions::MakeRoom(const model::KvPool& pool, int64_t bytes) {
  if (pool.budget_bytes() <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  while (pool.budget_bytes() - pool.stats().used_bytes < bytes) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.busy || !it->second.hot) continue;
      if (victim == entries_.end() || it->second.last_used < victim->second.last_used) victim = it;
    }
    if (victim == entries_.end()) return;
    bytes_ -= victim->second.hot->bytes();
    ++dropped_for_room_;
    entries_.erase(victim);  // its session's pages go back to the pool
  }
}

HotStats HotSessions::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  HotStats s;
  s.bytes = bytes_;
  s.dropped_for_room = dropped_for_room_;
  for (const auto& [id, e] : entries_) {
    if (e.hot) ++s.sessions;
    if (e.busy) ++s.busy;
  }
  return s;
}

}  // namespace glimpse::decode_worker
