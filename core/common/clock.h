// Clock: the one source of "now" for policies with time in them (leases, heartbeats, retention),
// so tests drive time by hand. Clock::Real() is the system clock; FakeClock starts at a fixed
// instant and moves only when told. Both are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace glimpse {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The process-wide system clock (never destroyed).
  static Clock* Real();
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000))
      : now_ns_(ToNs(start)) {}
  absl::Time Now() const override { return absl::FromUnixNanos(now_ns_.load()); }
  void Advance(absl::Duration d) { now_ns_.fetch_add(absl::ToInt64Nanoseconds(d)); }
  void Set(absl::Time t) { now_ns_.store(ToNs(t)); }

 private:
  static int64_t ToNs(absl::Time t) { return absl::ToUnixNanos(t); }
  std::atomic<int64_t> now_ns_;
};

}  // namespace glimpse
