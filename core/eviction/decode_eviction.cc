#include "core/eviction/decode_eviction.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"
#include "core/eviction/head_eviction.h"
#include "kernels/attention_stats.h"

namespace glimpse::eviction {
namespace {

// Inputs that do not exist for every entry of a long generation, or that the decode does not
// compute.
constexpr std::pair<Need, const char*> kNotDuringDecode[] = {
    {kHiddenStates, "hidden states (kHiddenStates)"},
    {kPreRopeQueries, "pre-RoPE queries (kPreRopeQueries)"},
    {kLayerWeights, "the layer's weights across kv-heads (kLayerWeights)"},
    {kLookaheadAttention, "a lookahead pass (kLookaheadAttention)"},
};

// Fed tokens between two additions to the accumulated attention (H2O): the ring of queries holds
// at most this many when the interval is longer.
constexpr int64_t kAccumulateEvery = 32;

}  // namespace

DecodeEvictionOptions DecodeEvictionFor(const MethodSettings& settings, int64_t budget_tokens,
                                        int64_t interval) {
  DecodeEvictionOptions options;
  options.budget_tokens = budget_tokens;
  options.interval = interval;
  options.selection.sinks = settings.sinks;
  options.selection.window = settings.recent_window;
  options.selection.schedule = settings.schedule;
  options.selection.granularity = settings.granularity;
  return options;
}

absl::StatusOr<std::unique_ptr<DecodeEviction>> DecodeEviction::Create(
    const model::Model& model, const Scorer& scorer, DecodeEvictionOptions options) {
  const std::string name(scorer.name());
  for (const auto& [need, what] : kNotDuringDecode) {
    if ((scorer.needs() & need) == 0) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "scorer '", name, "' needs ", what, ", which decode-time eviction cannot provide"));
  }
  if (options.selection.schedule == Schedule::kCake) {
    return absl::FailedPreconditionError(
        "Schedule::kCake needs one preference per layer; decode-time eviction scores one kv-head "
        "at a time");
  }
  if (options.interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode eviction interval must be >= 1 token; got ", options.interval));
  }
  if (scorer.window() > 0) options.selection.window = scorer.window();
  const int64_t forced = options.selection.sinks + options.selection.window;
  if (options.budget_tokens < std::max<int64_t>(1, forced)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decode eviction budget of ", options.budget_tokens, " entries per head is below the ",
        forced, " that scorer '", name, "' always keeps (", options.selection.sinks, " sinks + ",
        options.selection.window, " recent)"));
  }
  options.selection.budget_tokens = options.budget_tokens;
  options.selection.budget_ratio = 0.0;
  return std::unique_ptr<DecodeEviction>(
      new DecodeEviction(model.config(), scorer, std::move(options)));
}

DecodeEviction::DecodeEviction(const model::ModelConfig& config, const Scorer& scorer,
                               DecodeEvictionOptions options)
    : config_(config),
      scorer_(scorer),
      options_(std::move(options)),
      window_((scorer.needs() & kWindowQueries) != 0 ? scorer.window() : 0),
      accumulates_((scorer.needs() & kAccumulatedAttention) != 0),
      slots_(std::max(window_,
                      accumulates_ ? std::min<int64_t>(options_.interval, kAccumulateEvery) : 0)) {
  if (slots_ == 0) return;
  queries_.assign(config_.n_layers,
                  std::vector<float>(slots_ * config_.n_heads * config_.head_dim));
  slot_position_.assign(config_.n_layers, std::vector<int32_t>(slots_, -1));
  if (accumulates_) carried_.resize(int64_t{config_.n_layers} * config_.n_heads);
}

void DecodeEviction::OnLayer(int32_t layer, const model::LayerActivations& a) {
  if (slots_ == 0) return;
  if (accumulated_until_ < 0) accumulated_until_ = a.positions[0];  // the first fed token
  const int64_t row = int64_t{config_.n_heads} * config_.head_dim;
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const int64_t slot = a.positions[t] % slots_;
    std::memcpy(&queries_[layer][slot * row], &a.q[t * row], row * sizeof(float));
    slot_position_[layer][slot] = a.positions[t];
  }
}

void DecodeEviction::Accumulate(model::Sequence& session) {
  const int32_t next = session.next_position();
  if (!accumulates_ || accumulated_until_ < 0 || accumulated_until_ >= next) return;
  const model::KvCache& cache = session.cache();
  const int64_t H = config_.n_heads, hd = config_.head_dim, group = H / cache.n_kv_heads();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  session.pool().ParallelFor(cache.n_layers(), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q, acc;
    std::vector<int32_t> q_pos;
    for (int64_t l = begin; l < end; ++l) {
      for (int32_t kv = 0; kv < cache.n_kv_heads(); ++kv) {
        const model::KvHead head = cache.Read(static_cast<int32_t>(l), kv);
        for (int64_t g = 0; g < group; ++g) {
          const int64_t qh = kv * group + g;
          q.clear();
          q_pos.clear();
          for (int32_t p = accumulated_until_; p < next; ++p) {
            const int64_t slot = p % slots_;
            if (slot_position_[l][slot] != p) continue;  // older than the ring (cannot happen)
            const float* row = &queries_[l][(slot * H + qh) * hd];
            q.insert(q.end(), row, row + hd);
            q_pos.push_back(p);
          }
          acc.assign(head.size(), 0.0f);
          kernels::AccumulateAttention(acc.data(), q.data(), q_pos.data(), head.keys.data(),
                                       head.positions.data(), scale,
                                       static_cast<int64_t>(q_pos.size()), head.size(), hd);
          auto& sums = carried_[l * H + qh];
          for (int64_t j = 0; j < head.size(); ++j) sums[head.positions[j]] += acc[j];
        }
      }
    }
  });
  accumulated_until_ = next;
}

void DecodeEviction::AccumulatedRows(int32_t layer, int32_t kv_head,
                                     std::span<const int32_t> positions,
                                     std::vector<float>& out) const {
  const int64_t H = config_.n_heads, group = H / config_.n_kv_heads;
  const int64_t T = static_cast<int64_t>(positions.size());
  out.assign(group * T, 0.0f);
  for (int64_t g = 0; g < group; ++g) {
    const auto& sums = carried_[int64_t{layer} * H + kv_head * group + g];
    for (int64_t j = 0; j < T; ++j) {
      const auto it = sums.find(positions[j]);
      if (it != sums.end()) out[g * T + j] = it->second;
    }
  }
}

void DecodeEviction::Forget(const EvictionResult& result) {
  const int64_t H = config_.n_heads, group = H / config_.n_kv_heads;
  for (size_t l = 0; l < result.evicted.size(); ++l) {
    for (size_t kv = 0; kv < result.evicted[l].size(); ++kv) {
      for (int64_t g = 0; g < group; ++g) {
        auto& sums = carried_[static_cast<int64_t>(l) * H + static_cast<int64_t>(kv) * group + g];
        for (int32_t p : result.evicted[l][kv].positions) sums.erase(p);
      }
    }
  }
}

void DecodeEviction::WindowQueries(int32_t layer, int32_t next_position,
                                   std::vector<float>& out) const {
  const int64_t H = config_.n_heads, hd = config_.head_dim, W = window_;
  out.assign(H * W * hd, std::nanf(""));
  for (int64_t w = 0; w < W; ++w) {
    const int64_t position = next_position - W + w;
    if (position < 0) continue;
    const int64_t slot = position % W;
    if (slot_position_[layer][slot] != position) continue;
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(&out[(h * W + w) * hd], &queries_[layer][(slot * H + h) * hd],
                  hd * sizeof(float));
    }
  }
}

absl::Status DecodeEviction::AfterToken(model::Sequence& session) {
  // Accumulated attention is added before the ring of queries wraps, so a long interval does not
  // need a long ring.
  if (accumulates_ && accumulated_until_ >= 0 &&
      session.next_position() - accumulated_until_ >= slots_) {
    Accumulate(session);
  }
  if (++fed_ < options_.interval) return absl::OkStatus();
  return Evict(session);
}

absl::Status DecodeEviction::Evict(model::Sequence& session) {
  fed_ = 0;
  Accumulate(session);  // every interval, evicting or not: no query's attention is skipped
  model::KvCache& cache = session.cache();
  const int32_t L = cache.n_layers(), Hkv = cache.n_kv_heads();
  bool over = false;
  for (int32_t l = 0; l < L && !over; ++l) {
    for (int32_t h = 0; h < Hkv && !over; ++h) over = cache.size(l, h) > options_.budget_tokens;
  }
  if (!over) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  const int64_t group = config_.n_heads / Hkv, span = group * window_ * config_.head_dim;
  EvictionResult result;
  result.scores.assign(L, std::vector<std::vector<float>>(Hkv));
  std::vector<absl::Status> statuses(L);
  session.pool().ParallelFor(L, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> window_q;     // [H, W, hd]
    std::vector<float> accumulated;  // [group, T]
    for (int64_t l = begin; l < end; ++l) {
      const int32_t layer = static_cast<int32_t>(l);
      if (window_ > 0) WindowQueries(layer, session.next_position(), window_q);
      for (int32_t h = 0; h < Hkv && statuses[l].ok(); ++h) {
        if (cache.size(layer, h) < std::max<int64_t>(window_, 1)) {
          // Shorter than the window (a prompt evicted below it): within budget, kept whole.
          result.scores[l][h].assign(cache.size(layer, h), 0.0f);
          continue;
        }
        HeadInputs inputs{.window_queries = window_ > 0 ? window_q.data() + h * span : nullptr};
        if (accumulates_) {
          AccumulatedRows(layer, h, cache.positions(layer, h), accumulated);
          inputs.accumulated_attention = accumulated.data();
        }
        statuses[l] = ScoreHead(session, scorer_, layer, h, inputs, result.scores[l][h]);
      }
    }
  });
  for (const absl::Status& status : statuses) RETURN_IF_ERROR(status);
  ASSIGN_OR_RETURN(result.kept, SelectRagged(result.scores, options_.selection, {}));
  RETURN_IF_ERROR(ApplyKept(session, result));
  if (accumulates_) Forget(result);
  cache.Seal();  // the kept rows are final: group formats quantise their full pages
  result.scoring_seconds = SecondsSince(start);
  ++stats_.evictions;
  for (const auto& layer : result.evicted) {
    for (const model::KvHead& head : layer) stats_.evicted_entries += head.size();
  }
  stats_.seconds += result.scoring_seconds;
  if (options_.on_evicted) options_.on_evicted(std::move(result));
  return absl::OkStatus();
}

}  // namespace glimpse::eviction
