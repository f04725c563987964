// Deltas against a decode worker's hot copy (prefill_delta.h): the wire form, and a delta that
// turns the base into exactly the prefilled state or, when the hot copy is not the base, changes
// nothing.
#include "core/worker/prefill_delta.h"

#include "core/kvstate/cache_pages.h"
#include "core/kvstate/test_state.h"
#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

constexpr int32_t kLayers = 2, kHeads = 2, kDim = 8;

// Values exactly representable in fp16, so an fp16 round trip is exact.
float Value(int64_t seed) { return static_cast<float>(seed % 61 - 30) / 8.0f; }

// A cache whose head (l, h) holds the positions p < n with keep(p, l, h).
template <typename Keep>
model::KvCache MakeCache(int32_t n, Keep keep) {
  model::KvCache cache(kLayers, kHeads, kDim);
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t h = 0; h < kHeads; ++h) {
      for (int32_t p = 0; p < n; ++p) {
        if (!keep(p, l, h)) continue;
        model::KvHead& head = cache.head(l, h);
        head.positions.push_back(p);
        for (int j = 0; j < kDim; ++j) {
          head.keys.push_back(Value(p * 7 + j + l));
          head.values.push_back(Value(p * 11 + 3 * j + h));
        }
      }
    }
  }
  return cache;
}

// The base: 30 tokens, every third evicted. After the turn (40 tokens): some base entries gone,
// the new ones kept, and position 3 (cold in the base) recalled.
model::KvCache Base() {
  return MakeCache(30, [](int32_t p, int32_t l, int32_t h) { return (p + l + h) % 3 != 0; });
}
model::KvCache After() {
  return MakeCache(40, [](int32_t p, int32_t l, int32_t h) {
    if (p >= 30 || p == 3) return true;
    return (p + l + h) % 3 != 0 && p % 5 != 1;
  });
}

kvstate::EncodedState Encode(const model::KvCache& cache) {
  kvstate::StateIdentity id;
  id.namespace_key = kvstate::testing::TestNamespace();
  id.model = kvstate::testing::TestModel();
  id.state_key = kvstate::MakeStateKey(id.namespace_key, std::vector<int32_t>(40, 5));
  id.architecture = "llama";
  id.token_count = 40;
  return *kvstate::EncodeState({.retained = &cache}, id, {.page_tokens = 4});
}

void ExpectSameCache(const model::KvCache& got, const model::KvCache& want) {
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t h = 0; h < kHeads; ++h) {
      EXPECT_EQ(got.head(l, h).positions, want.head(l, h).positions) << l << "," << h;
      EXPECT_EQ(got.head(l, h).keys, want.head(l, h).keys) << l << "," << h;
      EXPECT_EQ(got.head(l, h).values, want.head(l, h).values) << l << "," << h;
    }
  }
}

TEST(PrefillDeltaTest, TheDeltaTurnsTheBaseIntoThePrefilledState) {
  const model::KvCache base = Base(), after = After();
  const kvstate::StateKey key =
      kvstate::MakeStateKey(kvstate::testing::TestNamespace(), std::vector<int32_t>{1, 2});
  Delta delta = MakeDelta(HeadPositions(base), key, after);
  // Only what the base lacks travels: the 10 new tokens and the recalled position 3 (where the
  // base had evicted it) per head.
  EXPECT_LT(delta.added.TotalEntries(), after.TotalEntries() / 2);
  EXPECT_EQ(delta.added.head(0, 0).positions.front(), 3);  // (3 + 0 + 0) % 3 == 0: was cold
  const std::vector<uint8_t> wire = EncodeDeltaBase(delta.base);
  absl::StatusOr<DeltaBase> decoded = DecodeDeltaBase(wire);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->base_key, key);
  EXPECT_EQ(decoded->dropped, delta.base.dropped);
  EXPECT_EQ(decoded->final_counts, delta.base.final_counts);
  EXPECT_EQ(decoded->final_crcs, delta.base.final_crcs);

  const kvstate::EncodedState added = Encode(delta.added);
  model::KvCache hot = Base();
  ASSERT_TRUE(ApplyDelta(*decoded, added.manifest, added.pages(), hot).ok());
  ExpectSameCache(hot, after);
}

TEST(PrefillDeltaTest, AHotCopyThatIsNotTheBaseIsLeftAsItWas) {
  const model::KvCache after = After();
  Delta delta = MakeDelta(HeadPositions(Base()), {}, after);
  const kvstate::EncodedState added = Encode(delta.added);
  // Missing a position the delta drops (every base head loses position 1 or 6 ...).
  model::KvCache fewer = MakeCache(
      30, [](int32_t p, int32_t l, int32_t h) { return (p + l + h) % 3 != 0 && p % 5 != 1; });
  const model::KvCache fewer_before = fewer;
  absl::Status st = ApplyDelta(delta.base, added.manifest, added.pages(), fewer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  ExpectSameCache(fewer, fewer_before);
  // Holding an extra entry the base did not: the heads would not end as the prefill kept them.
  model::KvCache more =
      MakeCache(30, [](int32_t p, int32_t l, int32_t h) { return (p + l + h) % 3 != 0 || p == 9; });
  const model::KvCache more_before = more;
  st = ApplyDelta(delta.base, added.manifest, added.pages(), more);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  ExpectSameCache(more, more_before);
}

TEST(PrefillDeltaTest, CorruptOrTruncatedBasesAreDataLoss) {
  Delta delta = MakeDelta(HeadPositions(Base()), {}, After());
  std::vector<uint8_t> wire = EncodeDeltaBase(delta.base);
  for (size_t cut : {size_t{0}, size_t{3}, wire.size() / 2, wire.size() - 1}) {
    EXPECT_EQ(DecodeDeltaBase(std::span(wire).first(cut)).status().code(),
              absl::StatusCode::kDataLoss)
        << cut;
  }
  wire[10] ^= 1;
  EXPECT_EQ(DecodeDeltaBase(wire).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace glimpse::worker
