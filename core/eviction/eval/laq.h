// LAQ (Lookahead Q-Cache; noforit/Lookahead_Q-Cache, run_LAQ.sh) as the harness's draft-based
// baseline for LookaheadKV. Stage 1 is SnapKV (observation window W = 32) at the run's budget;
// the evicted cache then drafts the first `draft_tokens` tokens of the answer greedily (after the
// assistant header); stage 2 rescores the FULL cache with the draft's pseudo queries (stage-2
// window = the draft): the header and draft rows, fed after the prompt, attend over the full
// cache and
//
//   s[h, j] = 1 / (n · G) · Σ_{rows i} Σ_{g in h's GQA group} softmax_j(q_{i,g} · k_j / √hd),
//
// the same read-out as LookaheadKV's (lookahead_pass.h: softmax over every key a row sees, read
// at prompt keys), then average-pooled along the keys with SnapKV's kernel, as SnapKV pools its
// window scores. The caller selects under the same budget. Its cost, the draft decode and the
// rescoring pass, is what LookaheadKV's learned tokens replace.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/selection.h"
#include "core/model/kv_cache.h"
#include "core/model/sequence.h"

namespace glimpse::eviction::eval {

struct LaqOptions {
  int32_t draft_tokens = 8;
  int64_t kernel = 5;  // SnapKV's default pooling kernel (avg, kvpress)
};

// `session` holds the prompt's prefill (T = next_position() tokens); `full` is its snapshot
// (cache_contents.h) and `stage1` SnapKV's kept entries. Returns [layer][Hkv · T]; the session's
// cache is left holding `full`.
absl::StatusOr<std::vector<std::vector<float>>> LaqScores(model::Sequence& session,
                                                          const std::vector<model::KvHead>& full,
                                                          const KeptEntries& stage1,
                                                          std::span<const int32_t> header_rows,
                                                          const LaqOptions& options);

}  // namespace glimpse::eviction::eval
