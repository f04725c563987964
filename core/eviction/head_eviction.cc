#include "core/eviction/head_eviction.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::eviction {

LayerView BaseView(const model::Sequence& session, const Scorer& scorer, int32_t layer) {
  const model::ModelConfig& c = session.model().config();
  return LayerView{.layer = layer,
                   .n_layers = c.n_layers,
                   .n_heads = c.n_heads,
                   .n_kv_heads = c.n_kv_heads,
                   .head_dim = c.head_dim,
                   .hidden = c.hidden,
                   .window = scorer.window(),
                   .rope_inv_freq = session.rope_inv_freq().data(),
                   .rope_style = c.rope_style};
}

absl::Status Annotate(const absl::Status& status, const Scorer& scorer, std::string_view where) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("scorer '", std::string(scorer.name()), "' at ",
                                   std::string(where), ": ", std::string(status.message())));
}

absl::Status ScoreHead(const model::Sequence& session, const Scorer& scorer, int32_t layer,
                       int32_t kv_head, const HeadInputs& inputs, std::vector<float>& scores) {
  const uint32_t needs = scorer.needs();
  const model::KvHead kv = session.cache().Read(layer, kv_head);
  LayerView view = BaseView(session, scorer, layer);
  view.n_heads = view.n_heads / view.n_kv_heads;
  view.n_kv_heads = 1;
  view.first_kv_head = kv_head;
  view.n_tokens = kv.size();
  view.positions = kv.positions.data();
  if (needs & kKeys) view.keys = kv.keys.data();
  if (needs & kValues) view.values = kv.values.data();
  if (needs & kWindowQueries) view.window_queries = inputs.window_queries;
  if (needs & kAccumulatedAttention) view.accumulated_attention = inputs.accumulated_attention;
  std::vector<float> by_entry;  // [T]
  if ((needs & kLookaheadAttention) && inputs.lookahead_by_position != nullptr) {
    by_entry.resize(kv.size());
    for (int64_t j = 0; j < kv.size(); ++j) {
      by_entry[j] = inputs.lookahead_by_position[kv.positions[j]];
    }
    view.lookahead_attention = by_entry.data();
  }
  scores.assign(kv.size(), 0.0f);
  return Annotate(scorer.Score(view, scores.data()), scorer,
                  absl::StrCat("layer ", layer, " kv-head ", kv_head));
}

absl::StatusOr<KeptEntries> SelectRagged(const HeadScores& scores, const SelectionOptions& options,
                                         const std::vector<double>& preferences) {
  const int32_t Hkv = static_cast<int32_t>(scores[0].size());
  int64_t T = 0;
  for (const auto& layer : scores) {
    for (const std::vector<float>& head : layer) T = std::max<int64_t>(T, head.size());
  }
  auto split = [&](int64_t size) { return std::clamp<int64_t>(options.sinks, 0, size); };
  std::vector<std::vector<float>> padded(scores.size());  // [layer][Hkv · T]
  for (size_t l = 0; l < scores.size(); ++l) {
    padded[l].assign(Hkv * T, std::numeric_limits<float>::lowest());
    for (int32_t h = 0; h < Hkv; ++h) {
      const std::vector<float>& s = scores[l][h];
      const int64_t head = split(s.size()), pad = T - static_cast<int64_t>(s.size());
      float* row = padded[l].data() + h * T;
      std::copy(s.begin(), s.begin() + head, row);
      std::copy(s.begin() + head, s.end(), row + head + pad);
    }
  }
  ASSIGN_OR_RETURN(KeptEntries kept, Select(padded, T, Hkv, options, preferences));
  for (size_t l = 0; l < scores.size(); ++l) {
    for (int32_t h = 0; h < Hkv; ++h) {
      const int64_t head = split(scores[l][h].size());
      const int64_t pad = T - static_cast<int64_t>(scores[l][h].size());
      std::vector<int64_t>& k = kept[l][h];
      k.erase(std::remove_if(k.begin(), k.end(),
                             [&](int64_t i) { return i >= head && i < head + pad; }),
              k.end());
      for (int64_t& i : k) i = i < head ? i : i - pad;
    }
  }
  return kept;
}

namespace {

// Copies the entries of `kv` that `keep` (strictly increasing indices) leaves out, with their
// scores.
void CopyEvicted(const model::KvHead& kv, const std::vector<int64_t>& keep,
                 const std::vector<float>& scores, int64_t hd, model::KvHead& out,
                 std::vector<float>& out_scores) {
  const int64_t n_out = kv.size() - static_cast<int64_t>(keep.size());
  out.keys.resize(n_out * hd);
  out.values.resize(n_out * hd);
  out.positions.resize(n_out);
  out_scores.resize(n_out);
  size_t next = 0;  // the next kept index
  int64_t o = 0;    // the next evicted row
  for (int64_t j = 0; j < kv.size(); ++j) {
    if (next < keep.size() && keep[next] == j) {
      ++next;
      continue;
    }
    std::memcpy(&out.keys[o * hd], &kv.keys[j * hd], hd * sizeof(float));
    std::memcpy(&out.values[o * hd], &kv.values[j * hd], hd * sizeof(float));
    out.positions[o] = kv.positions[j];
    out_scores[o] = scores[j];
    ++o;
  }
}

}  // namespace

absl::Status ApplyKept(model::Sequence& session, EvictionResult& result) {
  model::KvCache& cache = session.cache();
  const int64_t hd = cache.head_dim();
  const int32_t L = cache.n_layers(), Hkv = cache.n_kv_heads();
  result.kept_positions.assign(L, std::vector<std::vector<int32_t>>(Hkv));
  result.evicted.assign(L, std::vector<model::KvHead>(Hkv));
  result.evicted_scores.assign(L, std::vector<std::vector<float>>(Hkv));
  // Heads are independent (KvCache takes distinct heads from distinct threads, as the forward
  // pass writes them); copying every evicted row out is most of the work.
  std::vector<absl::Status> statuses(static_cast<size_t>(L) * Hkv);
  session.pool().ParallelFor(L * Hkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int32_t layer = static_cast<int32_t>(i / Hkv), h = static_cast<int32_t>(i % Hkv);
      const std::vector<int64_t>& keep = result.kept[layer][h];
      CopyEvicted(cache.Read(layer, h), keep, result.scores[layer][h], hd, result.evicted[layer][h],
                  result.evicted_scores[layer][h]);
      statuses[i] = cache.Retain(layer, h, keep);
      const std::span<const int32_t> kept = cache.positions(layer, h);
      result.kept_positions[layer][h].assign(kept.begin(), kept.end());
    }
  });
  for (const absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

}  // namespace glimpse::eviction
