// PrefillAndEvict: one chunked forward pass with a LayerObserver that copies exactly what the
// scorer declared (Need bits) into per-layer buffers, then Score() per layer (empty session) or
// per (layer, kv-head) (history), one Select() over all layers, and per (layer, kv-head) a copy of
// the evicted entries followed by KvCache::Retain.
//
// Decisions beyond pipeline.h:
//   - Window: when the scorer reads an observation window (window() > 0), that window is also the
//     selection's protected recent window (options.window is overridden), as in SnapKV / PyramidKV
//     and kvpress, whose window scores are forced to max + 1. Scorers without a window use
//     options.window unchanged. A head shorter than the scorer's window is InvalidArgument,
//     detected before the prefill.
//   - Accumulated attention is computed chunk by chunk: after a chunk's K/V are appended, its
//     queries' softmax probabilities against every entry in the cache (scale 1/√hd, causal by
//     position, the forward pass's own rule) are summed into the query head's row
//     (AccumulateAttention, kernels/attention_stats.h). Rows are [T_kv] for the head's kv-head
//     (history + new entries), laid out head after head; with an empty session that is [H, T].
//   - Memory: captured inputs are held for every layer until scoring, e.g. hidden states cost
//     L·T·D floats. Keys and values are not copied during the prefill: an empty session's layer
//     view gathers [Hkv, T, hd] just before scoring; a per-head view points into the cache.
//   - Lookahead attention (kLookaheadAttention, LookaheadKV) is not captured during the prefill:
//     after it, the scorer's module runs over the full cache with LookaheadAttentionObserver
//     (lookahead_pass.h), which scores by position and so takes a ragged history as it is
//     (RunLookaheadPass itself insists on exactly T entries per head). Its time counts as scoring
//     (the eviction overhead, as the paper counts it).
//   - Ragged selection: see pipeline.h (padding with the lowest float between sinks and the rest).
//     A head shorter than sinks + window then has padding inside the forced window, which counts
//     against a kPerLayer / kGlobal budget; heads that a previous turn cut to >= sinks + window
//     (every selection keeps at least that many) never are.
#include "core/eviction/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"
#include "core/eviction/head_eviction.h"
#include "core/eviction/lookahead_module.h"
#include "core/eviction/lookahead_pass.h"
#include "core/eviction/recall.h"
#include "kernels/attention_stats.h"

namespace glimpse::eviction {
namespace {

// Queries of the turn's last tokens that recall scores cold pages with when the scorer has no
// window of its own (LookaheadKV): as many as the pipeline's default recent window.
constexpr int64_t kRecallQueryTokens = 32;

// The turn: N new tokens at positions first … first + N − 1.
struct Turn {
  int32_t first = 0;                      // P0 = next_position() before the call
  int64_t n_new = 0;                      // N
  int64_t window = 0;                     // the scorer's W (0 = none)
  const RecallRequest* recall = nullptr;  // cold entries to recall from, or none
  bool history() const { return first > 0; }
  bool recalls() const { return recall != nullptr && recall->candidate_tokens > 0; }
  // Rows of window queries captured per query head: the scorer's W, else recall's.
  int64_t query_window() const {
    return window > 0 ? window : (recalls() ? kRecallQueryTokens : 0);
  }
  bool captures_window_queries(uint32_t needs) const {
    return (needs & kWindowQueries) != 0 || recalls();
  }
};

// One layer's captured inputs; each is empty unless its Need bit is set.
struct LayerCapture {
  std::vector<float> hidden;      // [N, D]        kHiddenStates (no history)
  std::vector<float> window_q;    // [H, W, hd]    kWindowQueries
  std::vector<float> pre_rope_q;  // [N, H, hd]    kPreRopeQueries (no history)
  std::vector<float> attention;   // [Σ_h T_kv(h)] kAccumulatedAttention, row h at row[h]
  std::vector<int64_t> row;       // [H] offset of query head h's attention row
};

// Copies what `needs` asks for out of each (chunk, layer). New token t (position first + t) is
// row t of the hidden / pre-RoPE captures; its entry index in a head is the head's history size
// plus t.
class CaptureObserver : public model::LayerObserver {
 public:
  CaptureObserver(const model::Sequence& session, uint32_t needs, const Turn& turn)
      : session_(session),
        c_(session.model().config()),
        needs_(needs),
        turn_(turn),
        layers_(c_.n_layers) {
    const int64_t hd = c_.head_dim, H = c_.n_heads, N = turn.n_new, W = turn.query_window();
    const int64_t group = c_.n_heads / c_.n_kv_heads;
    for (int32_t layer = 0; layer < c_.n_layers; ++layer) {
      LayerCapture& l = layers_[layer];
      if (needs & kHiddenStates) l.hidden.resize(N * c_.hidden);
      // Rows of absent queries (N < W) stay NaN: window_attention.h gives them zero attention.
      if (turn.captures_window_queries(needs)) l.window_q.assign(H * W * hd, std::nanf(""));
      if (needs & kPreRopeQueries) l.pre_rope_q.resize(N * H * hd);
      if (needs & kAccumulatedAttention) {
        l.row.resize(H);
        int64_t size = 0;
        for (int64_t h = 0; h < H; ++h) {
          l.row[h] = size;
          size += session.cache().size(layer, static_cast<int32_t>(h / group)) + N;
        }
        l.attention.assign(size, 0.0f);
      }
    }
  }

  bool wants_pre_rope_queries() const override { return (needs_ & kPreRopeQueries) != 0; }

  void OnLayer(int32_t layer, const model::LayerActivations& a) override {
    LayerCapture& l = layers_[layer];
    const int64_t hd = c_.head_dim, H = c_.n_heads, D = c_.hidden;
    const int64_t first = a.positions[0] - turn_.first;  // rows [first, first + n) of the turn
    if (!l.hidden.empty()) {
      std::memcpy(&l.hidden[first * D], a.xn, a.n_tokens * D * sizeof(float));
    }
    if (!l.pre_rope_q.empty()) {
      std::memcpy(&l.pre_rope_q[first * H * hd], a.pre_rope_q, a.n_tokens * H * hd * sizeof(float));
    }
    if (!l.window_q.empty()) {
      // New token r goes to window row r − w0 with w0 = N − W (negative when N < W).
      const int64_t W = turn_.query_window(), w0 = turn_.n_new - W;
      for (int64_t t = std::max<int64_t>(0, w0 - first); t < a.n_tokens; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          std::memcpy(&l.window_q[(h * W + first + t - w0) * hd], &a.q[(t * H + h) * hd],
                      hd * sizeof(float));
        }
      }
    }
    if (!l.attention.empty()) AccumulateChunk(layer, a, l);
  }

  const LayerCapture& layer(int32_t l) const { return layers_[l]; }

 private:
  // attention[row h][j] += Σ over the chunk's queries of head h of their probability on entry j.
  void AccumulateChunk(int32_t layer, const model::LayerActivations& a, LayerCapture& l) {
    const int64_t hd = c_.head_dim, H = c_.n_heads, n = a.n_tokens;
    const int64_t group = c_.n_heads / c_.n_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<model::KvHead> heads(c_.n_kv_heads);  // the layer's entries, this chunk's included
    for (int32_t h = 0; h < c_.n_kv_heads; ++h) heads[h] = session_.cache().Read(layer, h);
    session_.pool().ParallelFor(H, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> q_rows(n * hd);  // [n, hd] one head's queries
      for (int64_t h = begin; h < end; ++h) {
        for (int64_t t = 0; t < n; ++t) {
          std::memcpy(&q_rows[t * hd], &a.q[(t * H + h) * hd], hd * sizeof(float));
        }
        const model::KvHead& kv = heads[h / group];
        kernels::AccumulateAttention(l.attention.data() + l.row[h], q_rows.data(), a.positions,
                                     kv.keys.data(), kv.positions.data(), scale, n, kv.size(), hd);
      }
    });
  }

  const model::Sequence& session_;
  const model::ModelConfig& c_;
  const uint32_t needs_;
  const Turn turn_;
  std::vector<LayerCapture> layers_;
};

// Gathers one layer's keys and values from the cache as [Hkv, T, hd].
void GatherCache(const model::KvCache& cache, int32_t layer, bool keys, std::vector<float>& out) {
  const int64_t hd = cache.head_dim();
  int64_t offset = 0;
  for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
    const model::KvHead kv = cache.Read(layer, h);
    out.resize(offset + kv.size() * hd);
    const std::vector<float>& src = keys ? kv.keys : kv.values;
    std::memcpy(out.data() + offset, src.data(), src.size() * sizeof(float));
    offset += kv.size() * hd;
  }
}

// Empty session: scores one layer into `scores` ([Hkv, T]); `preference` is set for CAKE (may be
// null). `lookahead` is [layer][Hkv · T] when the scorer needs kLookaheadAttention, else empty.
absl::Status ScoreLayer(const model::Sequence& session, const CaptureObserver& capture,
                        const Scorer& scorer, int32_t layer, std::span<const int32_t> positions,
                        const std::vector<std::vector<float>>& lookahead,
                        std::vector<float>& scores, double* preference) {
  const uint32_t needs = scorer.needs();
  const LayerCapture& l = capture.layer(layer);
  LayerView view = BaseView(session, scorer, layer);
  view.n_tokens = static_cast<int64_t>(positions.size());
  view.positions = positions.data();
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
  scores.assign(view.n_kv_heads * view.n_tokens, 0.0f);
  const absl::Status status = preference != nullptr
                                  ? scorer.ScoreWithPreference(view, scores.data(), preference)
                                  : scorer.Score(view, scores.data());
  return Annotate(status, scorer, absl::StrCat("layer ", layer));
}

// History: scores one (layer, kv-head) from what the prefill captured. `lookahead` is
// [layer][Hkv · P] by position (P = next_position()) when needed.
absl::Status ScoreCapturedHead(const model::Sequence& session, const CaptureObserver& capture,
                               const Scorer& scorer, int32_t layer, int32_t kv_head,
                               const std::vector<std::vector<float>>& lookahead,
                               std::vector<float>& scores) {
  const uint32_t needs = scorer.needs();
  const LayerCapture& l = capture.layer(layer);
  const model::ModelConfig& c = session.model().config();
  const int64_t group = c.n_heads / c.n_kv_heads;
  HeadInputs inputs;
  if (needs & kWindowQueries) {
    inputs.window_queries = l.window_q.data() + kv_head * group * scorer.window() * c.head_dim;
  }
  if (needs & kAccumulatedAttention) {
    inputs.accumulated_attention = l.attention.data() + l.row[kv_head * group];
  }
  if (needs & kLookaheadAttention) {
    inputs.lookahead_by_position =
        lookahead[layer].data() + int64_t{kv_head} * session.next_position();
  }
  return ScoreHead(session, scorer, layer, kv_head, inputs, scores);
}

// Scores every entry, layers (empty session) or heads (history) in parallel on the session's pool:
// scorers are stateless and single-threaded inside, so this keeps scoring on all cores like the
// prefill it follows. CAKE: the layer preference P_l goes to `preferences` when it is non-empty.
absl::StatusOr<HeadScores> ScoreAll(const model::Sequence& session, const CaptureObserver& capture,
                                    const Scorer& scorer, const Turn& turn,
                                    const std::vector<std::vector<float>>& lookahead,
                                    std::vector<double>& preferences) {
  const int32_t L = session.model().config().n_layers, Hkv = session.model().config().n_kv_heads;
  HeadScores scores(L, std::vector<std::vector<float>>(Hkv));
  const int64_t tasks = turn.history() ? int64_t{L} * Hkv : L;
  std::vector<absl::Status> statuses(tasks);
  std::vector<int32_t> positions(turn.n_new);  // empty session: entry t is token t
  for (int64_t t = 0; t < turn.n_new; ++t) positions[t] = static_cast<int32_t>(t);
  session.pool().ParallelFor(tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> layer_scores;  // [Hkv, T]
    for (int64_t task = begin; task < end; ++task) {
      if (turn.history()) {
        const int32_t layer = static_cast<int32_t>(task / Hkv),
                      h = static_cast<int32_t>(task % Hkv);
        statuses[task] =
            ScoreCapturedHead(session, capture, scorer, layer, h, lookahead, scores[layer][h]);
        continue;
      }
      const int32_t layer = static_cast<int32_t>(task);
      double* preference = preferences.empty() ? nullptr : &preferences[layer];
      statuses[task] = ScoreLayer(session, capture, scorer, layer, positions, lookahead,
                                  layer_scores, preference);
      for (int32_t h = 0; h < Hkv && statuses[task].ok(); ++h) {
        scores[layer][h].assign(layer_scores.begin() + h * turn.n_new,
                                layer_scores.begin() + (h + 1) * turn.n_new);
      }
    }
  });
  for (const absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return scores;
}

// The scorer's lookahead module, checked against the session's model; null when not needed.
absl::StatusOr<const LookaheadModule*> CheckLookahead(const model::Sequence& session,
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

// LookaheadKV's second pass over the session's whole cache, ragged or not: [layer][Hkv · P] by
// position, P = next_position() (lookahead_pass.h's observer and call, without RunLookaheadPass's
// requirement that every head hold all P entries). The cache is left as it was.
absl::StatusOr<std::vector<std::vector<float>>> LookaheadByPosition(model::Sequence& session,
                                                                    const LookaheadModule& module) {
  ASSIGN_OR_RETURN(const model::LoraAdapter adapter,
                   module.AdapterFor(session.model().config(), session.model().fingerprint()));
  LookaheadAttentionObserver observer(session, session.next_position(), module.n_lookahead());
  const model::EmbeddingsCall call{
      .lora = &adapter, .keep_entries = false, .all_logits = false, .observer = &observer};
  RETURN_IF_ERROR(session.ForwardEmbeddings(module.embeddings(), call).status());
  return std::move(observer.scores());
}

// Checks what can be checked before the prefill; the session is not touched.
absl::Status CheckTurn(const model::Sequence& session, const Turn& turn, const Scorer& scorer,
                       const SelectionOptions& options) {
  const std::string name(scorer.name());
  if (turn.n_new < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PrefillAndEvict needs at least one new token; got none at position ", turn.first));
  }
  if (turn.history()) {
    constexpr std::pair<Need, const char*> kNotForHistory[] = {
        {kHiddenStates, "hidden states (kHiddenStates)"},
        {kPreRopeQueries, "pre-RoPE queries (kPreRopeQueries)"},
        {kLayerWeights, "the layer's weights across kv-heads (kLayerWeights)"}};
    for (const auto& [need, what] : kNotForHistory) {
      if ((scorer.needs() & need) == 0) continue;
      return absl::FailedPreconditionError(
          absl::StrCat("scorer '", name, "' needs ", what, ", which a session with history (",
                       turn.first, " tokens) cannot provide for its entries"));
    }
    if (options.schedule == Schedule::kCake) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Schedule::kCake needs one preference per layer; scorer '", name,
          "' scores a session with history (", turn.first, " tokens) one kv-head at a time"));
    }
  }
  if (turn.window == 0) return absl::OkStatus();
  const model::KvCache& cache = session.cache();
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      const int64_t entries = cache.size(l, h) + turn.n_new;
      if (entries >= turn.window) continue;
      if (!turn.history()) {
        return absl::InvalidArgumentError(absl::StrCat("prompt of ", turn.n_new,
                                                       " tokens is shorter than scorer '", name,
                                                       "''s window of ", turn.window));
      }
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, " kv-head ", h, " would hold ",
                                                     entries, " entries, fewer than scorer '", name,
                                                     "''s window of ", turn.window));
    }
  }
  return absl::OkStatus();
}

// A recall request's cold entries: one head per (layer, kv-head), each in increasing position
// order, before the turn and not in the cache; the scorer must score from what exists after the
// prefill (accumulated attention was paid during it, to entries the cold ones were not among).
absl::Status CheckRecall(const model::Sequence& session, const Turn& turn, const Scorer& scorer) {
  if (!turn.recalls()) return absl::OkStatus();
  if ((scorer.needs() & kAccumulatedAttention) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "scorer '", std::string(scorer.name()),
        "' scores by the attention the prefill paid, which cold entries did not receive; it "
        "cannot recall them"));
  }
  const model::KvCache& cache = session.cache();
  const size_t heads = static_cast<size_t>(cache.n_layers()) * cache.n_kv_heads();
  if (turn.recall->cold.size() != heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("recall has cold entries for ", turn.recall->cold.size(),
                     " heads; the model has ", heads, " (layer, kv-head) pairs"));
  }
  for (size_t i = 0; i < heads; ++i) {
    const model::KvHead& cold = turn.recall->cold[i];
    const std::span<const int32_t> hot =
        cache.positions(i / cache.n_kv_heads(), i % cache.n_kv_heads());
    const std::string where = absl::StrCat("cold entries of layer ", i / cache.n_kv_heads(),
                                           " kv-head ", i % cache.n_kv_heads());
    if (cold.keys.size() != cold.positions.size() * cache.head_dim() ||
        cold.values.size() != cold.keys.size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", cold.size(), " positions but ",
                                                     cold.keys.size(), " key floats"));
    }
    int64_t h = 0;
    for (int64_t j = 0; j < cold.size(); ++j) {
      const int32_t p = cold.positions[j];
      if (p < 0 || p >= turn.first || (j > 0 && p <= cold.positions[j - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": position ", p, " is out of order or outside the history of ", turn.first));
      }
      while (h < static_cast<int64_t>(hot.size()) && hot[h] < p) ++h;
      if (h < static_cast<int64_t>(hot.size()) && hot[h] == p) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": position ", p, " is in the cache already"));
      }
    }
  }
  return absl::OkStatus();
}

// Puts each head's best cold pages (recall.h), chosen with the window queries of the head's GQA
// group, into the cache beside its entries. Returns the positions added, per layer · Hkv + head;
// ResourceExhausted when the KV pool cannot hold them.
absl::StatusOr<std::vector<std::vector<int32_t>>> AddRecallCandidates(
    model::Sequence& session, const CaptureObserver& capture, const Turn& turn) {
  model::KvCache& cache = session.cache();
  const int32_t Hkv = cache.n_kv_heads();
  const int64_t hd = cache.head_dim(), W = turn.query_window();
  const int64_t group = session.model().config().n_heads / Hkv;
  std::vector<std::vector<int32_t>> added(turn.recall->cold.size());
  std::vector<absl::Status> statuses(added.size());
  session.pool().ParallelFor(
      static_cast<int64_t>(added.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int32_t layer = static_cast<int32_t>(i / Hkv), h = static_cast<int32_t>(i % Hkv);
          const RecallQueries queries{
              .data = capture.layer(layer).window_q.data() + h * group * W * hd,
              .rows = group * W,
              .head_dim = hd};
          const model::KvHead& cold = turn.recall->cold[i];
          const std::vector<int64_t> rows = PickCandidates(
              cold, queries, turn.recall->candidate_tokens, turn.recall->page_tokens);
          const model::KvHead picked = Rows(cold, rows);
          if (picked.size() == 0) continue;
          model::KvHead merged = cache.Read(layer, h);
          AddMissingEntries(merged, picked);
          statuses[i] = cache.Assign(layer, h, merged);
          added[i] = picked.positions;
        }
      });
  for (const absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return added;
}

// Counts the added candidates and those selection kept, and takes the others out of `evicted`
// (their cold tier still holds them; pipeline.h).
void SettleCandidates(const std::vector<std::vector<int32_t>>& added, EvictionResult& result) {
  const size_t Hkv = result.kept_positions.empty() ? 1 : result.kept_positions[0].size();
  for (size_t i = 0; i < added.size(); ++i) {
    const std::vector<int32_t>& kept = result.kept_positions[i / Hkv][i % Hkv];
    result.recall_candidates += static_cast<int64_t>(added[i].size());
    for (int32_t p : added[i]) {
      result.recalled += std::binary_search(kept.begin(), kept.end(), p) ? 1 : 0;
    }
    model::KvHead& evicted = result.evicted[i / Hkv][i % Hkv];
    std::vector<float>& scores = result.evicted_scores[i / Hkv][i % Hkv];
    std::vector<int64_t> rows;
    std::vector<float> row_scores;
    for (size_t r = 0; r < evicted.positions.size(); ++r) {
      if (!std::binary_search(added[i].begin(), added[i].end(), evicted.positions[r])) {
        rows.push_back(static_cast<int64_t>(r));
        row_scores.push_back(scores[r]);
      }
    }
    if (rows.size() == evicted.positions.size()) continue;
    evicted = Rows(evicted, rows);
    scores = std::move(row_scores);
  }
}

// With history a ratio budget counts the session's tokens (pipeline.h).
SelectionOptions EffectiveOptions(const Turn& turn, SelectionOptions options) {
  if (turn.window > 0) options.window = turn.window;
  if (turn.history() && options.budget_tokens == 0 && options.budget_ratio > 0.0 &&
      options.budget_ratio <= 1.0) {
    const double tokens = static_cast<double>(turn.first + turn.n_new);
    options.budget_tokens = std::max<int64_t>(1, std::llround(options.budget_ratio * tokens));
    options.budget_ratio = 0.0;
  }
  return options;
}

// Everything after the checks: prefill, lookahead pass, scoring, selection, eviction.
absl::StatusOr<EvictionResult> Run(model::Sequence& session, std::span<const int32_t> tokens,
                                   const Scorer& scorer, const Turn& turn,
                                   const SelectionOptions& options,
                                   const LookaheadModule* lookahead_module) {
  EvictionResult result;
  const auto prefill_start = std::chrono::steady_clock::now();
  CaptureObserver capture(session, scorer.needs(), turn);
  ASSIGN_OR_RETURN(result.last_logits, session.Forward(tokens, /*all_logits=*/false, &capture));
  result.prefill_seconds = SecondsSince(prefill_start);

  const auto scoring_start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> candidates;  // positions recall added, per head
  if (turn.recalls()) {
    ASSIGN_OR_RETURN(candidates, AddRecallCandidates(session, capture, turn));
  }
  std::vector<std::vector<float>> lookahead;  // [layer][Hkv · P] by position
  if (lookahead_module != nullptr) {
    ASSIGN_OR_RETURN(lookahead, LookaheadByPosition(session, *lookahead_module));
    result.lookahead_seconds = SecondsSince(scoring_start);
  }
  // Schedule::kCake takes the scorer's per-layer preferences (CAKE); other scorers have none, and
  // Select then reports the missing layer_preference.
  std::vector<double> preferences;
  if (options.schedule == Schedule::kCake && scorer.has_layer_preference()) {
    preferences.assign(session.model().config().n_layers, 0.0);
  }
  ASSIGN_OR_RETURN(result.scores, ScoreAll(session, capture, scorer, turn, lookahead, preferences));
  ASSIGN_OR_RETURN(result.kept, SelectRagged(result.scores, options, preferences));
  RETURN_IF_ERROR(ApplyKept(session, result));
  session.cache().Seal();  // the kept rows are final: group formats quantise their full pages
  SettleCandidates(candidates, result);
  result.scoring_seconds = SecondsSince(scoring_start);
  return result;
}

}  // namespace

absl::StatusOr<EvictionResult> PrefillAndEvict(model::Sequence& session,
                                               std::span<const int32_t> tokens,
                                               const Scorer& scorer,
                                               const SelectionOptions& options,
                                               const RecallRequest* recall) {
  const Turn turn{.first = session.next_position(),
                  .n_new = static_cast<int64_t>(tokens.size()),
                  .window = scorer.window(),
                  .recall = recall};
  RETURN_IF_ERROR(CheckTurn(session, turn, scorer, options));
  RETURN_IF_ERROR(CheckRecall(session, turn, scorer));
  ASSIGN_OR_RETURN(const LookaheadModule* lookahead_module, CheckLookahead(session, scorer));
  absl::StatusOr<EvictionResult> result =
      Run(session, tokens, scorer, turn, EffectiveOptions(turn, options), lookahead_module);
  // The session's own checks fail before anything is appended; later errors leave a half-done
  // turn, which is dropped together with the history.
  if (!result.ok() && session.next_position() != turn.first) session.Reset();
  return result;
}

}  // namespace glimpse::eviction
