// Cold-page recall (DESIGN.md §1, §4): entries that earlier turns evicted (the cold tier a cache
// node keeps) compete again for the budget when a new turn's queries point at them.
//
// The cold entries of a (layer, kv-head) are cut into pages of `page_tokens` entries in position
// order, and each page is scored from its key summary (per-channel min m and max M of its post-RoPE
// keys) against the turn's last queries, as Quest does: for a query q the page's best logit is at
// most Σ_c max(q_c·m_c, q_c·M_c), so a page's score is the largest such bound over the queries of
// the head's GQA group. The best pages, up to `candidate_tokens` entries per head, become
// candidates: the pipeline (pipeline.h) puts them into the head beside its history and the turn's
// new tokens, the scorer scores every entry and selection keeps the budget, so a candidate is
// re-admitted only by beating a kept entry.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/model/kv_cache.h"

namespace glimpse::eviction {

// Cold entries to recall from, one KvHead per (layer, kv-head), indexed layer · Hkv + kv_head,
// each in increasing position order and holding no position its cache head holds.
struct RecallRequest {
  std::span<const model::KvHead> cold;
  int64_t candidate_tokens = 0;  // per head; 0 recalls nothing
  int64_t page_tokens = 64;      // entries per summarised page
};

// Queries the recall scores pages with: `rows` rows of head_dim floats (rows containing a NaN are
// absent and skipped).
struct RecallQueries {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t head_dim = 0;
};

// The summary bound of cold entries [begin, end) of `cold` against `queries` (-inf when no query
// row is present).
float PageBound(const model::KvHead& cold, int64_t begin, int64_t end,
                const RecallQueries& queries);

// Rows of `cold` (increasing) that become candidates: whole pages, best bound first, until at
// least min(candidate_tokens, cold.size()) rows are chosen. Empty when candidate_tokens <= 0 or no
// query row is present.
std::vector<int64_t> PickCandidates(const model::KvHead& cold, const RecallQueries& queries,
                                    int64_t candidate_tokens, int64_t page_tokens);

// The entries of `from` at `rows` (increasing), in a KvHead of their own.
model::KvHead Rows(const model::KvHead& from, std::span<const int64_t> rows);

// Merges the entries of `from` whose positions neither `into` nor `exclude` holds into `into`,
// keeping position order (all three in increasing position order).
void AddMissingEntries(model::KvHead& into, const model::KvHead& from,
                       const model::KvHead& exclude = {});

}  // namespace glimpse::eviction
