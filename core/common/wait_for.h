// WaitFor: polls `pred` every 20 ms until it holds or `timeout` has passed; whether it held (it is
// asked once more at the end). For tests that wait for what another process or thread brings
// about, instead of sleeping for a fixed time.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace glimpse {

template <typename Pred>
bool WaitFor(Pred pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return pred();
}

}  // namespace glimpse
