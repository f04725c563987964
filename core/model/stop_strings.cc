#include "core/model/stop_strings.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"

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
  RETURN_IF_ERROR(ValidateStopStrings(stops));
  return StopStrings(std::move(stops));
}

size_t PartialMatchAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

StopStrings::Step StopStrings::Push(std::string_view piece) {
  Step step;
  if (stopped_) return step;
  if (stops_.empty()) {  // the common case: nothing to look for, nothing held
    step.text.assign(piece);
    return step;
  }
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
  size_t held = 0;
  for (const std::string& stop : stops_) held = std::max(held, PartialMatchAtEnd(pending_, stop));
  const size_t shown = pending_.size() - held;
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
