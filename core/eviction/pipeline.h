// Prefill with eviction: runs a prompt through a Session while capturing what the scorer needs,
// scores every layer, selects under the budget and drops the evicted entries from the session's
// ragged KV cache. The kept original positions per (layer, kv-head) are returned.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/scorer.h"
#include "core/eviction/selection.h"
#include "core/model/session.h"

namespace glimpse::eviction {

struct EvictionResult {
  KeptEntries kept;  // entry indices, [layer][kv_head][...]
  std::vector<std::vector<std::vector<int32_t>>> kept_positions;  // same shape, token positions
  std::vector<float> last_logits;  // [vocab] logits of the prompt's last token (full cache)
  double prefill_seconds = 0.0;    // forward pass including capture
  double scoring_seconds = 0.0;    // scorer + selection + cache compaction
  double lookahead_seconds = 0.0;  // LookaheadKV's second pass (part of scoring_seconds)
};

// `session` must be empty (next_position() == 0): the prompt is the whole sequence; a non-empty
// session gets FailedPrecondition and is left untouched. Afterwards the session holds only the
// kept entries and continues at position prompt.size(). A scorer with a window (scorer.window() >
// 0, e.g. SnapKV's W) sets the selection's always-kept recent window, overriding
// options.window, as SnapKV and kvpress do; a prompt shorter than it is InvalidArgument before any
// prefill. A scorer needing kLookaheadAttention (LookaheadKV) gets its module checked against the
// model before the prefill (FailedPrecondition for another model's module) and its second pass run
// after it (lookahead_pass.h). Any later error (session, scorer, selection) resets the session to
// empty.
absl::StatusOr<EvictionResult> PrefillAndEvict(model::Session& session,
                                               std::span<const int32_t> prompt,
                                               const Scorer& scorer,
                                               const SelectionOptions& options);

}  // namespace glimpse::eviction
