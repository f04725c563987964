// The lookahead pass: one Session::ForwardEmbeddings call (adapter on every row, entries not kept)
// with an observer that turns each layer's lookahead queries into attention probabilities over
// the cache (kernels::AccumulateAttention, the forward pass's visibility rule and scale).
#include "core/eviction/lookahead_pass.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "kernels/attention_stats.h"

namespace glimpse::eviction {

LookaheadAttentionObserver::LookaheadAttentionObserver(const model::Sequence& session,
                                                       int64_t n_prompt, int64_t n_rows)
    : session_(session), n_prompt_(n_prompt), n_rows_(n_rows) {
  const model::ModelConfig& c = session.model().config();
  scores_.assign(c.n_layers, std::vector<float>(int64_t{c.n_kv_heads} * n_prompt, 0.0f));
}

void LookaheadAttentionObserver::OnLayer(int32_t layer, const model::LayerActivations& a) {
  const model::ModelConfig& c = session_.model().config();
  const int64_t hd = c.head_dim, H = c.n_heads, group = c.n_heads / c.n_kv_heads;
  int64_t first = 0;  // the chunk's first lookahead row (rows are in position order)
  while (first < a.n_tokens && a.positions[first] < n_prompt_) ++first;
  const int64_t m = a.n_tokens - first;
  if (m == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // probs[h] = Σ over the chunk's lookahead rows of query head h's probabilities, [n_kv(h)].
  std::vector<std::vector<float>> probs(H);
  const int32_t Hkv = static_cast<int32_t>(H / group);
  std::vector<model::KvHead> heads(Hkv);  // the layer's entries, lookahead rows included
  for (int32_t h = 0; h < Hkv; ++h) heads[h] = session_.cache().Read(layer, h);
  session_.pool().ParallelFor(H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q_rows(m * hd);  // [m, hd] one head's lookahead queries
    for (int64_t h = begin; h < end; ++h) {
      for (int64_t t = 0; t < m; ++t) {
        std::memcpy(&q_rows[t * hd], &a.q[((first + t) * H + h) * hd], hd * sizeof(float));
      }
      const model::KvHead& kv = heads[h / group];
      probs[h].assign(kv.size(), 0.0f);
      kernels::AccumulateAttention(probs[h].data(), q_rows.data(), a.positions + first,
                                   kv.keys.data(), kv.positions.data(), scale, m, kv.size(), hd);
    }
  });
  const float weight = 1.0f / static_cast<float>(n_rows_ * group);
  for (int64_t h = 0; h < H; ++h) {
    const model::KvHead& kv = heads[h / group];
    float* out = scores_[layer].data() + (h / group) * n_prompt_;
    for (int64_t j = 0; j < kv.size(); ++j) {
      if (kv.positions[j] < n_prompt_) out[kv.positions[j]] += weight * probs[h][j];
    }
  }
}

absl::StatusOr<std::vector<std::vector<float>>> RunLookaheadPass(model::Sequence& session,
                                                                 const LookaheadModule& module) {
  const int64_t T = session.next_position();
  if (T == 0) {
    return absl::FailedPreconditionError("the lookahead pass needs a prefilled prompt");
  }
  const model::KvCache& cache = session.cache();
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      if (cache.size(l, h) != T) {
        return absl::FailedPreconditionError(absl::StrCat("the lookahead pass needs all ", T,
                                                          " prompt entries; layer ", l, " kv-head ",
                                                          h, " holds ", cache.size(l, h)));
      }
    }
  }
  ASSIGN_OR_RETURN(const model::LoraAdapter adapter,
                   module.AdapterFor(session.model().config(), session.model().fingerprint()));
  LookaheadAttentionObserver observer(session, T, module.n_lookahead());
  const model::EmbeddingsCall call{.lora = &adapter,
                                   .lora_first_row = 0,
                                   .keep_entries = false,
                                   .all_logits = false,
                                   .observer = &observer};
  RETURN_IF_ERROR(session.ForwardEmbeddings(module.embeddings(), call).status());
  return std::move(observer.scores());
}

}  // namespace glimpse::eviction
