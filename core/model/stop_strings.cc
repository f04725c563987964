#include "core/model/stop_strings.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace glimpse::model {

absl::Status ValidateStopStrings(const std::vector<std::string>& stops, std::string_view field) {
  if (stops.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d strings (at most %d)", field, stops.size(), kMaxStopStrings));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty() || stops[i].size() > kMaxStopBytes) {
      return absl::InvalidArgumentError(absl::StrFormat("%s[%d] is %d bytes (want 1 to %d)", field,
                                                        i, stops[i].size(), kMaxStopBytes));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StopStrings> StopStrings::Create(std::vector<std::string> stops) {
  if (absl::Status s = ValidateStopStrings(stops); !s.ok()) return s;
  return StopStrings(std::move(stops));
}

size_t StopStrings::HeldTail() const {
  size_t held = 0;
  for (const std::string& stop : stops_) {
    // Longest proper prefix of `stop` that pending_ ends with (a full match was found already).
    const size_t most = std::min(pending_.size(), stop.size() - 1);
    for (size_t n = most; n > held; --n) {
      if (std::string_view(pending_).substr(pending_.size() - n) ==
          std::string_view(stop).substr(0, n)) {
        held = n;
        break;
      }
    }
  }
  return held;
}

StopStrings::Step StopStrings::Push(std::string_view piece) {
  Step step;
  if (stopped_) return step;
  pending_.append(piece);
  // Every earlier byte was returned only once no stop string could start there, so a match lies
  // inside pending_.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    step.text = pending_.substr(0, first);
    step.stopped = stopped_ = true;
    pending_.clear();
    return step;
  }
  const size_t shown = pending_.size() - HeldTail();
  step.text = pending_.substr(0, shown);
  pending_.erase(0, shown);
  return step;
}

std::string StopStrings::Finish() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace glimpse::model
