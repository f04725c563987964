// The steps of eviction over a cache whose heads are ragged, shared by the prefill pipeline
// (pipeline.h, a session with history) and decode-time eviction (decode_eviction.h): each
// (layer, kv-head) scored on its own, one selection over all heads with their lengths padded, and
// the evicted entries copied out before the cache drops them. Internal to core/eviction.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/scorer.h"
#include "core/eviction/selection.h"
#include "core/model/sequence.h"

namespace glimpse::eviction {

using HeadScores = std::vector<std::vector<std::vector<float>>>;  // [layer][kv_head][entry]

// The view of one layer with the model's shapes and the scorer's window; no inputs set.
LayerView BaseView(const model::Sequence& session, const Scorer& scorer, int32_t layer);

// `status` with the scorer's name and `where` in front of its message (ok stays ok).
absl::Status Annotate(const absl::Status& status, const Scorer& scorer, std::string_view where);

// What one (layer, kv-head) is scored from beyond its entries; each may be null when the scorer
// does not need it.
struct HeadInputs {
  const float* window_queries = nullptr;         // [group, W, hd] the head's GQA group, W =
                                                 //   scorer.window(); NaN rows: absent queries
  const float* accumulated_attention = nullptr;  // [group, T] rows of the group's query heads
  const float* lookahead_by_position = nullptr;  // [P] lookahead attention by token position
};

// Scores the entries of one (layer, kv-head) alone, as a LayerView with n_kv_heads = 1, n_heads =
// the GQA group and T = the head's entries, into `scores` ([T]).
absl::Status ScoreHead(const model::Sequence& session, const Scorer& scorer, int32_t layer,
                       int32_t kv_head, const HeadInputs& inputs, std::vector<float>& scores);

// Select() over heads of different lengths: each head's row is padded to the longest head with the
// lowest float, placed after its first `sinks` entries (so its own sinks and window stay forced);
// kept padding is dropped. Heads of equal length are passed through as they are.
absl::StatusOr<KeptEntries> SelectRagged(const HeadScores& scores, const SelectionOptions& options,
                                         const std::vector<double>& preferences);

// Copies the evicted entries of every (layer, kv-head) and their scores out of the cache into
// `result` (kept_positions, evicted, evicted_scores from result.kept and result.scores), then drops
// them there (KvCache::Retain), one (layer, kv-head) per task on the session's thread pool.
absl::Status ApplyKept(model::Sequence& session, EvictionResult& result);

}  // namespace glimpse::eviction
