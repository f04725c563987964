// Routing policy (DESIGN.md section 1): pure functions over candidate lists, no state.
//
// Decode worker: the one holding the session hot when it is alive and has room for the turn's
// growth; otherwise the least-loaded live worker with room for the whole reservation (fewest
// queued requests, then the smallest reserved fraction, then the id). Prefill: on the decode worker
// when the turn's new tokens are at most `prefill_on_decode_tokens` (conditional disaggregation) or
// when no prefill worker is alive; otherwise the prefill worker with the shortest queue.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace glimpse::coordinator {

struct DecodeCandidate {
  std::string id;
  int64_t capacity_bytes = 0;
  int64_t free_bytes = 0;    // capacity − reserved
  int64_t queue_length = 0;  // last heartbeat plus turns routed since
};

struct PrefillCandidate {
  std::string id;
  int64_t queue_length = 0;
};

// Least-loaded candidate with free_bytes >= need; nullopt when none has room.
std::optional<std::string> PickDecodeWorker(const std::vector<DecodeCandidate>& candidates,
                                            int64_t need_bytes);

struct PrefillChoice {
  bool on_decode = true;
  std::string worker;  // empty when on_decode
};
PrefillChoice PickPrefill(const std::vector<PrefillCandidate>& candidates, int64_t new_tokens,
                          int64_t prefill_on_decode_tokens);

}  // namespace glimpse::coordinator
