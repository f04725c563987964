#include "core/kvstate/test_cache.h"

#include <vector>

#include "core/kvstate/test_state.h"
#include "gtest/gtest.h"

namespace glimpse::kvstate::testing {
namespace {

float Value(int64_t seed) { return static_cast<float>(seed % 61 - 30) / 8.0f; }

}  // namespace

void AppendTestEntry(model::KvHead* head, int32_t position) {
  head->positions.push_back(position);
  for (int j = 0; j < kTestHeadDim; ++j) {
    head->keys.push_back(Value(position * 7 + j));
    head->values.push_back(Value(position * 11 + 3 * j));
  }
}

void AppendTestEntry(model::KvCache* cache, int32_t l, int32_t h, int32_t position) {
  model::KvHead entry;
  AppendTestEntry(&entry, position);
  EXPECT_TRUE(
      cache->Append(l, h, entry.keys.data(), entry.values.data(), entry.positions.data(), 1).ok());
}

model::KvCache TestCache(int32_t tokens,
                         const std::function<bool(int32_t p, int32_t l, int32_t h)>& keep) {
  model::KvCache cache(kTestLayers, kTestKvHeads, kTestHeadDim);
  for (int32_t l = 0; l < kTestLayers; ++l) {
    for (int32_t h = 0; h < kTestKvHeads; ++h) {
      model::KvHead head;
      for (int32_t p = 0; p < tokens; ++p) {
        if (keep(p, l, h)) AppendTestEntry(&head, p);
      }
      EXPECT_TRUE(cache.Assign(l, h, head).ok());
    }
  }
  return cache;
}

StateIdentity TestIdentity(uint32_t tokens) {
  StateIdentity id;
  id.namespace_key = TestNamespace();
  id.model = TestModel();
  id.state_key = MakeStateKey(id.namespace_key, std::vector<int32_t>(tokens, 5));
  id.architecture = "llama";
  id.token_count = tokens;
  return id;
}

void ExpectSameCache(const model::KvCache& got, const model::KvCache& want) {
  for (int32_t l = 0; l < want.n_layers(); ++l) {
    for (int32_t h = 0; h < want.n_kv_heads(); ++h) {
      const model::KvHead a = got.Read(l, h), b = want.Read(l, h);
      EXPECT_EQ(a.positions, b.positions) << l << "," << h;
      EXPECT_EQ(a.keys, b.keys) << l << "," << h;
      EXPECT_EQ(a.values, b.values) << l << "," << h;
    }
  }
}

}  // namespace glimpse::kvstate::testing
