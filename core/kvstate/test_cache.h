// Small synthetic KV caches for the tests of states, deliveries and deltas: kTestLayers ×
// kTestKvHeads heads of kTestHeadDim, entries whose keys and values are exactly representable in
// fp16 (so an fp16 round trip is exact) and depend only on the position.
#pragma once

#include <cstdint>
#include <functional>

#include "core/kvstate/cache_pages.h"
#include "core/model/kv_cache.h"

namespace glimpse::kvstate::testing {

inline constexpr int32_t kTestLayers = 2, kTestKvHeads = 2, kTestHeadDim = 8;

// Appends the entry of `position` to `head`.
void AppendTestEntry(model::KvHead* head, int32_t position);
// The same entry appended to head (l, h) of a cache.
void AppendTestEntry(model::KvCache* cache, int32_t l, int32_t h, int32_t position);

// Head (l, h) of the cache holds the positions p < tokens with keep(p, l, h), in order.
model::KvCache TestCache(int32_t tokens,
                         const std::function<bool(int32_t p, int32_t l, int32_t h)>& keep);

// The identity of a state of `tokens` tokens (ids all 5) under TestNamespace() and TestModel().
StateIdentity TestIdentity(uint32_t tokens);

// Every head of `got` equals that of `want`: positions, keys and values (gtest expectations).
void ExpectSameCache(const model::KvCache& got, const model::KvCache& want);

}  // namespace glimpse::kvstate::testing
