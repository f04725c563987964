#include "core/eviction/eval/laq.h"

#include "core/common/status_macros.h"
#include "core/eviction/eval/cache_contents.h"
#include "core/eviction/eval/continuation.h"
#include "core/eviction/lookahead_pass.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction::eval {

absl::StatusOr<std::vector<std::vector<float>>> LaqScores(model::Sequence& session,
                                                          const std::vector<model::KvHead>& full,
                                                          const KeptEntries& stage1,
                                                          std::span<const int32_t> header_rows,
                                                          const LaqOptions& options) {
  const int64_t T = session.next_position();
  RETURN_IF_ERROR(SetCache(session, full, &stage1));
  ASSIGN_OR_RETURN(std::vector<int32_t> draft,
                   GreedyContinuation(session, header_rows, {}, {}, options.draft_tokens));
  RETURN_IF_ERROR(SetCache(session, full, nullptr));

  std::vector<int32_t> rows(header_rows.begin(), header_rows.end());
  rows.insert(rows.end(), draft.begin(), draft.end());
  LookaheadAttentionObserver observer(session, T, static_cast<int64_t>(rows.size()));
  model::EmbeddingsCall call;
  call.keep_entries = false;
  call.observer = &observer;
  std::vector<float> embeddings(rows.size() * session.model().config().hidden);
  session.model().EmbedTokens(rows, embeddings.data());
  RETURN_IF_ERROR(session.ForwardEmbeddings(embeddings, call).status());

  std::vector<std::vector<float>> scores = std::move(observer.scores());
  const int32_t n_kv_heads = session.cache().n_kv_heads();
  std::vector<float> pooled(T);
  for (std::vector<float>& layer : scores) {
    for (int32_t h = 0; h < n_kv_heads; ++h) {
      float* head = layer.data() + h * T;
      Pool1d(pooled.data(), head, T, options.kernel, Pooling::kAvg);
      std::copy(pooled.begin(), pooled.end(), head);
    }
  }
  return scores;
}

}  // namespace glimpse::eviction::eval
