// Decode-time eviction: bounds the KV cache a long generation holds. Attached to one sequence's
// decoding (model::DecodeFrom, worker::Engine::Decode) as its model::DecodeObserver, it keeps the
// queries of the last W fed tokens of every layer, and after every `interval`-th fed token, when
// some (layer, kv-head) holds more than `budget_tokens` entries, scores every entry of every head
// (prompt and generated alike) and keeps `budget_tokens` per head (kvpress's DecodingPress:
// compression_interval, target_size). Between evictions a head grows by at most `interval`
// entries, so a sequence holds at most budget_tokens + interval entries per head, however long it
// generates.
//
// Scoring is the pipeline's for a session with history (pipeline.h): each (layer, kv-head) alone,
// a LayerView with n_kv_heads = 1, n_heads = the GQA group, T = the head's entries and, for a
// scorer with a window (SnapKV, PyramidKV), the post-RoPE queries of the last W fed tokens at
// their positions; rows of tokens not fed during this decode (fewer than W so far) are absent
// (NaN: zero attention). Selection runs over the heads' own entries (SelectRagged): the first
// `sinks` and the last `window` entries of each head are always kept, the window being the
// scorer's when it has one. Accumulated attention (H2O) is each entry's sum, per query head, of
// the attention every query fed during this decode paid it: every min(interval, 32) tokens and
// before each eviction the queries fed since are added to the carried sums of the entries present
// (causal by position, so exactly what each query gave them when it ran, since entries leave only
// at evictions); the prompt's
// own attention is not carried over, every entry starts at 0. What the scorer needs must exist
// for every entry at any time: hidden states, pre-RoPE queries, layer weights and lookahead
// attention are FailedPrecondition at Create (so are Schedule::kCake; a budget below sinks +
// window is InvalidArgument). Scorers that qualify: snapkv, pyramidkv (Schedule::kPyramid),
// streamingllm, h2o, foresightkv.
//
// Evicted entries are not dropped silently: each eviction's result (evicted entries with their
// scores, the kept entries' scores) goes to `on_evicted` when set (a decode worker adds them to
// the turn's cold tier), else it is discarded and only counted.
//
// Position-keyed capture: a pass that fails and runs again (the engine retries a step after
// making room) writes the same rows again. Not thread-safe: one sequence, one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/profile.h"
#include "core/eviction/scorer.h"
#include "core/eviction/selection.h"
#include "core/model/generator.h"

namespace glimpse::eviction {

// Fed tokens between evictions when a caller names none.
inline constexpr int64_t kDefaultDecodeInterval = 32;

struct DecodeEvictionOptions {
  int64_t budget_tokens = 0;                  // entries each (layer, kv-head) keeps (>= 1)
  int64_t interval = kDefaultDecodeInterval;  // fed tokens between evictions (>= 1)
  // Sinks, recent window, granularity and schedule; its budget fields are ignored.
  SelectionOptions selection;
  // Receives each eviction's result (kept, kept_positions, scores, evicted, evicted_scores);
  // may be empty.
  std::function<void(EvictionResult&&)> on_evicted;
};

// The options of a method's settings (sinks, recent window, schedule, granularity) at a budget.
DecodeEvictionOptions DecodeEvictionFor(const MethodSettings& settings, int64_t budget_tokens,
                                        int64_t interval);

struct DecodeEvictionStats {
  int64_t evictions = 0;        // evictions run
  int64_t evicted_entries = 0;  // entries they took out of the cache (all heads)
  double seconds = 0.0;         // scoring, selection and compaction
};

class DecodeEviction : public model::DecodeObserver {
 public:
  // Checks the scorer and the options (see above) for sequences of `model`. `model` and `scorer`
  // are not owned and must outlive the object.
  static absl::StatusOr<std::unique_ptr<DecodeEviction>> Create(const model::Model& model,
                                                                const Scorer& scorer,
                                                                DecodeEvictionOptions options);

  void OnLayer(int32_t layer, const model::LayerActivations& activations) override;
  absl::Status AfterToken(model::Sequence& session) override;

  // Runs one eviction now, whatever the count (AfterToken calls it), after accumulating the
  // attention of the queries fed since the last one; nothing more when no head holds more than
  // the budget. An error leaves the cache unspecified (a prefix of the kept entries
  // per head, KvCache::Retain): the caller drops the session.
  absl::Status Evict(model::Sequence& session);

  const DecodeEvictionStats& stats() const { return stats_; }

 private:
  DecodeEviction(const model::ModelConfig& config, const Scorer& scorer,
                 DecodeEvictionOptions options);
  // Layer `layer`'s window queries [H, W, hd] for the W positions before `next_position`, in
  // order, NaN where a position's queries were not captured.
  void WindowQueries(int32_t layer, int32_t next_position, std::vector<float>& out) const;
  // Adds the attention of the queries fed since the last call to every entry's carried sum.
  void Accumulate(model::Sequence& session);
  // The carried sums of one kv-head's group for its entries at `positions`: [group, T].
  void AccumulatedRows(int32_t layer, int32_t kv_head, std::span<const int32_t> positions,
                       std::vector<float>& out) const;
  // Drops the sums of the entries an eviction took out.
  void Forget(const EvictionResult& result);

  const model::ModelConfig& config_;
  const Scorer& scorer_;
  const DecodeEvictionOptions options_;
  const int64_t window_;    // W, the scorer's window (0: it reads no queries)
  const bool accumulates_;  // the scorer reads accumulated attention (H2O)
  const int64_t slots_;     // queries kept per layer: max(W, min(interval, 32) when accumulating)
  // Per layer, a ring of `slots_` slots: slot s holds the queries [H, hd] of the token at
  // slot_position, the most recent fed token whose position ≡ s (mod slots_).
  std::vector<std::vector<float>> queries_;          // [layer][slots · H · hd]
  std::vector<std::vector<int32_t>> slot_position_;  // [layer][slots], -1 = empty
  // Accumulated attention: per (layer, query head), each held entry's sum by position, over the
  // queries fed during this decode up to accumulated_until_ (-1 before the first).
  std::vector<std::unordered_map<int32_t, float>> carried_;  // [layer · H]
  int32_t accumulated_until_ = -1;
  int64_t fed_ = 0;  // tokens fed since the last eviction
  DecodeEvictionStats stats_;
};

}  // namespace glimpse::eviction
