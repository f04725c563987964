#include "coordinator/router.h"

#include <tuple>

namespace glimpse::coordinator {

std::optional<std::string> PickDecodeWorker(const std::vector<DecodeCandidate>& candidates,
                                            int64_t need_bytes) {
  const DecodeCandidate* best = nullptr;
  auto key = [](const DecodeCandidate& c) {
    double used = c.capacity_bytes > 0 ? 1.0 - static_cast<double>(c.free_bytes) /
                                                   static_cast<double>(c.capacity_bytes)
                                       : 1.0;
    return std::make_tuple(c.queue_length, used, c.id);
  };
  for (const DecodeCandidate& c : candidates) {
    if (c.free_bytes < need_bytes) continue;
    if (best == nullptr || key(c) < key(*best)) best = &c;
  }
  if (best == nullptr) return std::nullopt;
  return best->id;
}

PrefillChoice PickPrefill(const std::vector<PrefillCandidate>& candidates, int64_t new_tokens,
                          int64_t prefill_on_decode_tokens) {
  if (new_tokens <= prefill_on_decode_tokens || candidates.empty()) return PrefillChoice{};
  const PrefillCandidate* best = &candidates.front();
  for (const PrefillCandidate& c : candidates) {
    if (std::tie(c.queue_length, c.id) < std::tie(best->queue_length, best->id)) best = &c;
  }
  return PrefillChoice{false, best->id};
}

}  // namespace glimpse::coordinator
