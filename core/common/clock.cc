#include "core/common/clock.h"

namespace glimpse {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();  // never destroyed: usable during static teardown
  return clock;
}

}  // namespace glimpse
