// Stop sequences over streamed text (OpenAI's `stop`): generation ends where one of the strings
// first appears in the generated text, and the caller sees the text before it, never the string
// itself, nor a piece of one that might still complete.
//
// Push takes each piece of text as it is decoded (model/text_stream.h) and returns what can be
// shown now: everything except the longest tail that is still the start of some stop string (so
// at most the longest string's length - 1 bytes wait). Once a string appears, the returned text
// ends right before its first occurrence, `stopped` is set, and later pushes return nothing.
// Finish returns whatever waited (the stream ended without a stop string). Without strings,
// Push returns its input unchanged.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::model {

// OpenAI's limit on `stop` entries; the bytes bound keeps the text held back small.
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopBytes = 256;

// Length of the longest tail of `text` that is a proper prefix of `marker` (bytes that may yet
// become `marker` once more text arrives); 0 when none is.
size_t PartialMatchAtEnd(std::string_view text, std::string_view marker);

// InvalidArgument naming `field` when there are more than kMaxStopStrings strings or one is empty
// or longer than kMaxStopBytes.
absl::Status ValidateStopStrings(const std::vector<std::string>& stops,
                                 std::string_view field = "stop");

class StopStrings {
 public:
  // Fails as ValidateStopStrings.
  static absl::StatusOr<StopStrings> Create(std::vector<std::string> stops);

  struct Step {
    std::string text;  // to show now
    bool stopped = false;
  };
  Step Push(std::string_view piece);
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  std::vector<std::string> stops_;
  std::string pending_;  // pushed, not returned, no stop string inside
  bool stopped_ = false;
};

}  // namespace glimpse::model
