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
// scorer's when it has one. What the scorer needs must exist for every entry at any time:
// hidden states, pre-RoPE queries, layer weights, lookahead attention and accumulated attention
// are FailedPrecondition at Create (so are Schedule::kCake and a budget below sinks + window:
// InvalidArgument). Scorers that qualify: snapkv, pyramidkv (Schedule::kPyramid), streamingllm.
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
  absl::Status AfterToken(model::Session& session) override;

  // Runs one eviction now, whatever the count (AfterToken calls it); nothing when no head holds
  // more than the budget. An error leaves the cache unspecified (a prefix of the kept entries
  // per head, KvCache::Retain): the caller drops the session.
  absl::Status Evict(model::Session& session);

  const DecodeEvictionStats& stats() const { return stats_; }

 private:
  DecodeEviction(const model::ModelConfig& config, const Scorer& scorer,
                 DecodeEvictionOptions options);
  // Layer `layer`'s window queries [H, W, hd] for the W positions before `next_position`, in
  // order, NaN where a position's queries were not captured.
  void WindowQueries(int32_t layer, int32_t next_position, std::vector<float>& out) const;

  const model::ModelConfig& config_;
  const Scorer& scorer_;
  const DecodeEvictionOptions options_;
  const int64_t window_;  // W, the scorer's window (0: it reads no queries)
  // Per layer, a ring of W slots: slot s holds the queries [H, hd] of the token at slot_position,
  // the most recent fed token whose position ≡ s (mod W).
  std::vector<std::vector<float>> queries_;          // [layer][W · H · hd]
  std::vector<std::vector<int32_t>> slot_position_;  // [layer][W], -1 = empty
  int64_t fed_ = 0;                                  // tokens fed since the last eviction
  DecodeEvictionStats stats_;
};

}  // namespace glimpse::eviction
