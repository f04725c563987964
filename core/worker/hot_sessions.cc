#include "core/worker/hot_sessions.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/common/log.h"
#include "core/worker/policy.h"

namespace glimpse::worker {

absl::StatusOr<std::optional<HotSession>> HotSessions::Checkout(const std::string& id,
                                                                absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + wait;
  auto busy = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = entries_.find(id);
    return it != entries_.end() && it->second.busy;
  };
  while (busy()) {
    if (returned_.WaitWithDeadline(&mu_, deadline) && busy()) {
      return absl::FailedPreconditionError(absl::StrCat("a turn of session ", id,
                                                        " is still running on this worker after ",
                                                        absl::FormatDuration(wait)));
    }
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
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[id];
  if (e.released) {
    entries_.erase(id);
    returned_.SignalAll();
    return;
  }
  e.busy = false;
  returned_.SignalAll();
  e.last_used = ++clock_;
  bytes_ += session.bytes();
  e.hot = std::move(session);
  MakeRoomLocked(id);
}

void HotSessions::Abandon(const std::string& id) {
  absl::MutexLock lock(&mu_);
  entries_.erase(id);
  returned_.SignalAll();
}

int64_t HotSessions::Release(const std::string& id) {
  absl::MutexLock lock(&mu_);
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

void HotSessions::ShrinkIdleLocked(const std::function<bool()>& room, int64_t shortfall) {
  using Iterator = std::map<std::string, Entry>::iterator;
  std::vector<std::pair<Iterator, kernels::KvDType>> order;  // idle copies that would shrink
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.busy || !it->second.hot) continue;
    const model::KvCache& cache = it->second.hot->session->cache();
    const std::optional<kernels::KvDType> to = IdleShrinkFormat(cache.dtype());
    if (to && cache.BytesIn(*to) < cache.TotalBytes()) order.push_back({it, *to});
  }
  int64_t saved = 0;
  for (const auto& [it, to] : order) {
    const model::KvCache& cache = it->second.hot->session->cache();
    saved += cache.TotalBytes() - cache.BytesIn(to);
  }
  if (saved < shortfall) return;
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first->second.last_used < b.first->second.last_used;
  });
  for (const auto& [it, to] : order) {
    if (room()) return;
    HotSession& hot = *it->second.hot;
    const int64_t before = hot.bytes();
    if (absl::Status st = hot.session->cache().Reencode(to); !st.ok()) {
      log::Warning("re-encoding an idle hot session failed; dropped it (it is stored)",
                   {{"session", it->first}, {"error", st.ToString()}});
      bytes_ -= before;
      ++dropped_for_room_;
      entries_.erase(it);
      continue;
    }
    bytes_ += hot.bytes() - before;
    ++reencoded_for_room_;
    log::Info("re-encoded an idle hot session to make room",
              {{"session", it->first},
               {"format", model::KvDTypeName(to)},
               {"bytes_before", static_cast<long long>(before)},
               {"bytes_after", static_cast<long long>(hot.bytes())}});
  }
}

void HotSessions::MakeRoom(const model::KvPool& pool, int64_t bytes) {
  if (pool.budget_bytes() <= 0) return;
  absl::MutexLock lock(&mu_);
  auto room = [&] { return pool.budget_bytes() - pool.stats().used_bytes >= bytes; };
  if (reencode_idle_ && !room()) {
    ShrinkIdleLocked(room, bytes - (pool.budget_bytes() - pool.stats().used_bytes));
  }
  while (!room()) {
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
  absl::MutexLock lock(&mu_);
  HotStats s;
  s.bytes = bytes_;
  s.dropped_for_room = dropped_for_room_;
  s.reencoded_for_room = reencoded_for_room_;
  for (const auto& [id, e] : entries_) {
    if (e.hot) ++s.sessions;
    if (e.busy) ++s.busy;
  }
  return s;
}

}  // namespace glimpse::worker
