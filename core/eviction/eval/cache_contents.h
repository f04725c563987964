// The cache contents the harness switches between on one prefilled session: a snapshot of every
// (layer, kv-head) of the full cache, and setting the session's cache to it or to a kept subset
// of it (Select()'s entry indices). Positions stay the original ones, so every content continues
// at the same next position.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "core/eviction/selection.h"
#include "core/model/kv_cache.h"
#include "core/model/sequence.h"

namespace glimpse::eviction::eval {

// [layer · Hkv + kv_head] copies of the cache's heads.
std::vector<model::KvHead> Snapshot(const model::KvCache& cache);

// Sets every head of the session's cache to `full`'s entries, or only those in `kept`
// (indices into `full`'s heads, [layer][kv_head][...]).
// ResourceExhausted when the session's KV pool cannot hold them.
absl::Status SetCache(model::Sequence& session, const std::vector<model::KvHead>& full,
                      const KeptEntries* kept);

}  // namespace glimpse::eviction::eval
