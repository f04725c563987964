// Prefill with eviction, one turn of a session: runs the turn's new tokens through a Session
// (attending over whatever history the session already holds) while capturing what the scorer
// needs, scores every entry of every (layer, kv-head) — history and new alike — selects under the
// budget, drops the evicted entries from the session's ragged KV cache and hands them back, so the
// caller can page them to a cache node's cold tier (DESIGN.md §1: nothing is silently dropped).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/recall.h"
#include "core/eviction/scorer.h"
#include "core/eviction/selection.h"
#include "core/model/kv_cache.h"
#include "core/model/sequence.h"

namespace glimpse::eviction {

// Every per-head field is [layer][kv_head][...]. "Entries" are a head's entries just before
// eviction (its history, then the turn's new tokens), in cache order, i.e. increasing position.
struct EvictionResult {
  KeptEntries kept;  // indices of the kept entries, strictly increasing
  std::vector<std::vector<std::vector<int32_t>>> kept_positions;  // same shape, token positions
  // The scorer's score of every entry (before selection; higher = keep), one per entry.
  std::vector<std::vector<std::vector<float>>> scores;
  // The evicted entries themselves (keys, values, positions increasing): kept ∪ evicted = the
  // history and new entries plus the recall candidates kept, disjoint (candidates that lose are in
  // neither). Copied out of the cache once; the session keeps only the kept ones.
  std::vector<std::vector<model::KvHead>> evicted;
  std::vector<std::vector<std::vector<float>>> evicted_scores;  // same shape, aligned with evicted
  std::vector<float> last_logits;  // [vocab] logits of the turn's last token (full cache)
  double prefill_seconds = 0.0;    // forward pass including capture
  double scoring_seconds = 0.0;    // scorer + selection + cache compaction
  double lookahead_seconds = 0.0;  // LookaheadKV's second pass (part of scoring_seconds)
  int64_t recall_candidates = 0;   // cold entries recall put beside the heads' entries
  int64_t recalled = 0;            // ... of which selection kept (now in the cache)
};

// Runs `tokens` (N >= 1, else InvalidArgument) at positions P0 = session.next_position() … P0+N−1
// over the session's cache, then scores and evicts. Afterwards the session holds only the kept
// entries and continues at P0 + N.
//
// Empty session (P0 == 0): the tokens are the whole prompt; results are exactly those of a plain
// single-turn prefill with eviction (scores per layer, one LayerView of [Hkv, T] per layer).
//
// Session with history (P0 > 0; the history may be ragged: per head its own count and its own
// non-contiguous positions): every (layer, kv-head) is scored on its own, as a LayerView with
// n_kv_heads = 1, n_heads = the GQA group and T = that head's entries (history + N new):
//   keys / values / positions   the head's entries from the cache;
//   window queries              the last w = min(W, N) new tokens' queries; when N < W the first
//                               W − w rows are absent (NaN, window_attention.h: zero attention),
//                               so window scorers use the queries the turn has;
//   accumulated attention       Σ over this call's N queries of their attention to every entry;
//   lookahead attention         LookaheadKV's second pass over the whole (ragged) cache.
// A scorer that needs kHiddenStates or kPreRopeQueries (gates, expected attention: inputs that
// exist only for tokens prefilled in this call) or kLayerWeights (DefensiveKV: it couples the
// kv-heads of a layer, which ragged heads do not line up), and Schedule::kCake (one preference per
// layer), get FailedPrecondition naming the scorer and the input, before any prefill.
// Scores whose definition spans heads are per head here (SnapKV's window score = the head's max +
// 1 instead of the layer's; the window entries are kept either way).
//
// Selection (selection.h) runs over each head's own entries: the first `sinks` and the last
// `window` entries of the head (history included) are always kept. Heads of different lengths
// are padded to the longest with the lowest score, the padding placed between the sinks and the
// rest, so it is never kept ahead of a real entry. Budget: budget_tokens per head as given; a
// budget_ratio counts the session's tokens, not the entries present: with history C =
// max(1, llround(ratio · (P0 + N))) per head (what the decode worker holds stays a fixed share of
// the conversation), passed to Select as budget_tokens (kPyramid then uses x = C and T = the
// longest head). With P0 == 0 both readings agree and the ratio goes to Select unchanged.
//
// Windows: a scorer with a window (scorer.window() = W > 0, e.g. SnapKV) sets the selection's
// always-kept recent window to W, overriding options.window, as SnapKV and kvpress do. Every head
// must then hold at least W entries after the prefill (P0 == 0: N >= W), else InvalidArgument.
// A scorer needing kLookaheadAttention (LookaheadKV) gets its module checked against the model
// before the prefill (FailedPrecondition for another model's module) and its pass run after it.
//
// Recall (recall.h; `recall` may be null): after the prefill, each head's best cold pages by key
// summary against the turn's last queries (the scorer's window queries, else the last 32 new
// tokens') join the head's entries as candidates, before the lookahead pass and the scoring, so
// they are scored and selected like any entry: kept candidates stay in the cache (and
// kept_positions); the others are dropped, not put in `evicted`: the cold tier they came from
// still holds them, and storing them again with this turn's evictions would write every losing
// candidate once per turn. The turn's new
// tokens attended only over the history the session held. A scorer needing kAccumulatedAttention
// is FailedPrecondition with a recall request (cold entries received none); cold entries that are
// not one head per (layer, kv-head), out of position order, at or after P0, or in the cache are
// InvalidArgument.
//
// Errors before the prefill (arguments, scorer checks, the session's own token and context
// checks) leave the session unchanged. Any later error (scorer, selection) resets the session to
// empty — its history too: the caller reloads it (from the decode worker or the cache node).
absl::StatusOr<EvictionResult> PrefillAndEvict(model::Sequence& session,
                                               std::span<const int32_t> tokens,
                                               const Scorer& scorer,
                                               const SelectionOptions& options,
                                               const RecallRequest* recall = nullptr);

}  // namespace glimpse::eviction
