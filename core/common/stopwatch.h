// Elapsed time for measurements (TTFT, prefill and decode seconds, benchmarks): the steady clock,
// which never jumps. Policies with time in them (leases, heartbeats) use Clock (clock.h) instead,
// so tests can drive them.
#pragma once

#include <chrono>

namespace glimpse {

// Seconds from `start` (a steady_clock::now()) to now.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace glimpse
