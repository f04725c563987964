// PrefillAndEvict: one chunked forward pass with a LayerObserver that copies exactly what the
// scorer declared (Need bits) into per-layer buffers, then per layer a LayerView → Score(), one
// Select() over all layers, and KvCache::Retain per (layer, kv-head).
//
// Decisions beyond pipeline.h:
//   - Window: when the scorer reads an observation window (window() > 0), that window is also the
//     selection's protected recent window (options.window is overridden), as in SnapKV / PyramidKV
//     and kvpress, whose window scores are forced to max + 1. Scorers without a window use
//     options.window unchanged. A prompt shorter than the scorer's window is InvalidArgument,
//     detected before the prefill.
//   - Accumulated attention [H, T] is computed chunk by chunk: after a chunk's K/V are appended,
//     its queries' softmax probabilities against every entry in the cache (scale 1/√hd, causal by
//     position, the forward pass's own rule) are summed into the layer's row (AccumulateAttention,
//     kernels/attention_stats.h). Nothing of size T × T is held.
//   - Memory: captured inputs are held for every layer until scoring, e.g. hidden states cost
//     L·T·D floats. Keys and values are not copied during the prefill; each layer's [Hkv, T, hd]
//     view is gathered from the cache just before it is scored.
//   - A session that is not empty is FailedPrecondition and is left untouched; every later error
//     resets the session.
//   - Lookahead attention (kLookaheadAttention, LookaheadKV) is not captured during the prefill:
//     after it, RunLookaheadPass (lookahead_pass.h) runs the scorer's module over the prompt's
//     full cache, leaving the cache as it was; its time counts as scoring (the eviction overhead,
//     as the paper counts it). The module is checked against the model before the prefill.
#include "core/eviction/pipeline.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/lookahead_module.h"
#include "core/eviction/lookahead_pass.h"
#include "kernels/attention_stats.h"

namespace glimpse::eviction {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One layer's captured inputs; each is empty unless its Need bit is set.
struct LayerCapture {
  std::vector<float> hidden;      // [T, D]        kHiddenStates
  std::vector<float> window_q;    // [H, W, hd]    kWindowQueries
  std::vector<float> pre_rope_q;  // [T, H, hd]    kPreRopeQueries
  std::vector<float> attention;   // [H, T]        kAccumulatedAttention
};

// Copies what `needs` asks for out of each (chunk, layer). The session starts empty, so a token's
// position is also its row in the capture and its entry index in the cache.
class CaptureObserver : public model::LayerObserver {
 public:
  CaptureObserver(const model::Session& session, uint32_t needs, int64_t n_tokens, int64_t window)
      : session_(session),
        c_(session.model().config()),
        needs_(needs),
        n_tokens_(n_tokens),
        window_(window),
        layers_(c_.n_layers) {
    const int64_t hd = c_.head_dim, H = c_.n_heads;
    for (LayerCapture& l : layers_) {
      if (needs & kHiddenStates) l.hidden.resize(n_tokens * c_.hidden);
      if (needs & kWindowQueries) l.window_q.resize(H * window * hd);
      if (needs & kPreRopeQueries) l.pre_rope_q.resize(n_tokens * H * hd);
      if (needs & kAccumulatedAttention) l.attention.assign(H * n_tokens, 0.0f);
    }
  }

  bool wants_pre_rope_queries() const override { return (needs_ & kPreRopeQueries) != 0; }

  void OnLayer(int32_t layer, const model::LayerActivations& a) override {
    LayerCapture& l = layers_[layer];
    const int64_t hd = c_.head_dim, H = c_.n_heads, D = c_.hidden;
    const int64_t first = a.positions[0];  // rows [first, first + n) of the prompt
    if (!l.hidden.empty()) {
      std::memcpy(&l.hidden[first * D], a.xn, a.n_tokens * D * sizeof(float));
    }
    if (!l.pre_rope_q.empty()) {
      std::memcpy(&l.pre_rope_q[first * H * hd], a.pre_rope_q, a.n_tokens * H * hd * sizeof(float));
    }
    if (!l.window_q.empty()) {
      const int64_t w0 = n_tokens_ - window_;  // first window position
      for (int64_t t = std::max<int64_t>(0, w0 - first); t < a.n_tokens; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          std::memcpy(&l.window_q[(h * window_ + first + t - w0) * hd], &a.q[(t * H + h) * hd],
                      hd * sizeof(float));
        }
      }
    }
    if (!l.attention.empty()) AccumulateChunk(layer, a, l.attention.data());
  }

  const LayerCapture& layer(int32_t l) const { return layers_[l]; }

 private:
  // attention[h, j] += Σ over the chunk's queries of head h of their probability on entry j.
  void AccumulateChunk(int32_t layer, const model::LayerActivations& a, float* attention) {
    const int64_t hd = c_.head_dim, H = c_.n_heads, n = a.n_tokens;
    const int64_t group = c_.n_heads / c_.n_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    session_.pool().ParallelFor(H, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> q_rows(n * hd);  // [n, hd] one head's queries
      for (int64_t h = begin; h < end; ++h) {
        for (int64_t t = 0; t < n; ++t) {
          std::memcpy(&q_rows[t * hd], &a.q[(t * H + h) * hd], hd * sizeof(float));
        }
        const model::KvHead& kv = session_.cache().head(layer, static_cast<int32_t>(h / group));
        kernels::AccumulateAttention(attention + h * n_tokens_, q_rows.data(), a.positions,
                                     kv.keys.data(), kv.positions.data(), scale, n, kv.size(), hd);
      }
    });
  }

  const model::Session& session_;
  const model::ModelConfig& c_;
  const uint32_t needs_;
  const int64_t n_tokens_;
  const int64_t window_;
  std::vector<LayerCapture> layers_;
};

// Gathers one layer's keys and values from the cache as [Hkv, T, hd].
void GatherCache(const model::KvCache& cache, int32_t layer, bool keys, std::vector<float>& out) {
  const int64_t hd = cache.head_dim();
  int64_t offset = 0;
  for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
    const model::KvHead& kv = cache.head(layer, h);
    out.resize(offset + kv.size() * hd);
    const std::vector<float>& src = keys ? kv.keys : kv.values;
    std::memcpy(out.data() + offset, src.data(), src.size() * sizeof(float));
    offset += kv.size() * hd;
  }
}

// Scores every layer from the captured inputs. scores[layer] is [Hkv, T].
// `lookahead` is [layer][Hkv, T] when the scorer needs kLookaheadAttention, else empty.
// Scores one layer into `scores` ([Hkv, T]); `preference` is set for CAKE (may be null).
absl::Status ScoreLayer(const model::Session& session, const CaptureObserver& capture,
                        const Scorer& scorer, int32_t layer, int64_t n_tokens,
                        std::span<const int32_t> positions,
                        const std::vector<std::vector<float>>& lookahead,
                        std::vector<float>& scores, double* preference) {
  const model::ModelConfig& c = session.model().config();
  const uint32_t needs = scorer.needs();
  const LayerCapture& l = capture.layer(layer);
  LayerView view{.layer = layer,
                 .n_layers = c.n_layers,
                 .n_heads = c.n_heads,
                 .n_kv_heads = c.n_kv_heads,
                 .head_dim = c.head_dim,
                 .hidden = c.hidden,
                 .n_tokens = n_tokens,
                 .positions = positions.data(),
                 .window = scorer.window(),
                 .rope_inv_freq = session.rope_inv_freq().data(),
                 .rope_style = c.rope_style};
  std::vector<float> keys, values;  // [Hkv, T, hd]
  if (needs & kHiddenStates) view.hidden_states = l.hidden.data();
  if (needs & kKeys) {
    GatherCache(session.cache(), layer, /*keys=*/true, keys);
    view.keys = keys.data();
  }
  if (needs & kValues) {
    GatherCache(session.cache(), layer, /*keys=*/false, values);
    view.values = values.data();
  }
  if (needs & kWindowQueries) view.window_queries = l.window_q.data();
  if (needs & kPreRopeQueries) view.pre_rope_queries = l.pre_rope_q.data();
  if (needs & kAccumulatedAttention) view.accumulated_attention = l.attention.data();
  if (needs & kLayerWeights) view.weights = &session.model().weights().layers[layer];
  if (needs & kLookaheadAttention) view.lookahead_attention = lookahead[layer].data();
  scores.assign(int64_t{c.n_kv_heads} * n_tokens, 0.0f);
  absl::Status status = preference != nullptr
                            ? scorer.ScoreWithPreference(view, scores.data(), preference)
                            : scorer.Score(view, scores.data());
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("scorer '", std::string(scorer.name()), "' at layer ", layer,
                                   ": ", std::string(status.message())));
}

// Scores every layer, layers in parallel on the session's pool: scorers are stateless and run
// single-threaded inside, so this is what keeps scoring on all cores like the prefill it follows.
// CAKE: the layer preference P_l goes to Select (Schedule::kCake) when `preferences` is set.
absl::StatusOr<std::vector<std::vector<float>>> ScoreLayers(
    const model::Session& session, const CaptureObserver& capture, const Scorer& scorer,
    int64_t n_tokens, std::span<const int32_t> positions,
    const std::vector<std::vector<float>>& lookahead, std::vector<double>* preferences) {
  const int32_t n_layers = session.model().config().n_layers;
  std::vector<std::vector<float>> scores(n_layers);
  std::vector<absl::Status> statuses(n_layers);
  session.pool().ParallelFor(n_layers, 1, [&](int64_t begin, int64_t end) {
    for (int64_t layer = begin; layer < end; ++layer) {
      double* preference = preferences != nullptr ? &(*preferences)[layer] : nullptr;
      statuses[layer] = ScoreLayer(session, capture, scorer, static_cast<int32_t>(layer), n_tokens,
                                   positions, lookahead, scores[layer], preference);
    }
  });
  for (const absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return scores;
}

// Drops the evicted entries of every (layer, kv-head); returns their kept positions.
absl::StatusOr<std::vector<std::vector<std::vector<int32_t>>>> ApplyKept(model::KvCache& cache,
                                                                         const KeptEntries& kept) {
  std::vector<std::vector<std::vector<int32_t>>> positions(kept.size());
  for (int32_t layer = 0; layer < static_cast<int32_t>(kept.size()); ++layer) {
    positions[layer].resize(kept[layer].size());
    for (int32_t h = 0; h < static_cast<int32_t>(kept[layer].size()); ++h) {
      RETURN_IF_ERROR(cache.Retain(layer, h, kept[layer][h]));
      positions[layer][h] = cache.head(layer, h).positions;
    }
  }
  return positions;
}

// The scorer's lookahead module, checked against the session's model; null when not needed.
absl::StatusOr<const LookaheadModule*> CheckLookahead(const model::Session& session,
                                                      const Scorer& scorer) {
  if ((scorer.needs() & kLookaheadAttention) == 0) return nullptr;
  const LookaheadModule* module = scorer.lookahead_module();
  if (module == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scorer '", std::string(scorer.name()), "' needs lookahead attention but has no module"));
  }
  RETURN_IF_ERROR(
      module->AdapterFor(session.model().config(), session.model().fingerprint()).status());
  return module;
}

absl::StatusOr<EvictionResult> Run(model::Session& session, std::span<const int32_t> prompt,
                                   const Scorer& scorer, SelectionOptions options) {
  const int64_t n_tokens = static_cast<int64_t>(prompt.size());
  const int64_t window = scorer.window();
  if (window > 0) {
    if (n_tokens < window) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt of ", n_tokens, " tokens is shorter than scorer '",
                       std::string(scorer.name()), "''s window of ", window));
    }
    options.window = window;
  }
  ASSIGN_OR_RETURN(const LookaheadModule* lookahead_module, CheckLookahead(session, scorer));
  EvictionResult result;
  const auto prefill_start = std::chrono::steady_clock::now();
  CaptureObserver capture(session, scorer.needs(), n_tokens, window);
  ASSIGN_OR_RETURN(result.last_logits, session.Forward(prompt, /*all_logits=*/false, &capture));
  result.prefill_seconds = SecondsSince(prefill_start);

  const auto scoring_start = std::chrono::steady_clock::now();
  std::vector<int32_t> positions(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) positions[t] = static_cast<int32_t>(t);
  std::vector<std::vector<float>> lookahead;  // [layer][Hkv, T]
  if (lookahead_module != nullptr) {
    ASSIGN_OR_RETURN(lookahead, RunLookaheadPass(session, *lookahead_module));
    result.lookahead_seconds = SecondsSince(scoring_start);
  }
  // Schedule::kCake takes the scorer's per-layer preferences (CAKE); other scorers have none, and
  // Select then reports the missing layer_preference.
  std::vector<double> preferences;
  const bool cake = options.schedule == Schedule::kCake && scorer.has_layer_preference();
  if (cake) preferences.assign(session.model().config().n_layers, 0.0);
  ASSIGN_OR_RETURN(std::vector<std::vector<float>> scores,
                   ScoreLayers(session, capture, scorer, n_tokens, positions, lookahead,
                               cake ? &preferences : nullptr));
  ASSIGN_OR_RETURN(result.kept, Select(scores, n_tokens, session.model().config().n_kv_heads,
                                       options, preferences));
  ASSIGN_OR_RETURN(result.kept_positions, ApplyKept(session.cache(), result.kept));
  result.scoring_seconds = SecondsSince(scoring_start);
  return result;
}

}  // namespace

absl::StatusOr<EvictionResult> PrefillAndEvict(model::Session& session,
                                               std::span<const int32_t> prompt,
                                               const Scorer& scorer,
                                               const SelectionOptions& options) {
  if (session.next_position() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("PrefillAndEvict needs an empty session; this one is at position ",
                     session.next_position()));
  }
  absl::StatusOr<EvictionResult> result = Run(session, prompt, scorer, options);
  if (!result.ok()) session.Reset();
  return result;
}

}  // namespace glimpse::eviction
