// Deltas against a decode worker's hot copy (prefill_delta.h): the wire form, and a delta that
// turns the base into exactly the prefilled state or, when the hot copy is not the base, changes
// nothing.
#include "core/worker/prefill_delta.h"

#include "core/kvstate/cache_pages.h"
#include "core/kvstate/test_cache.h"
#include "core/kvstate/test_state.h"
#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

using kvstate::testing::ExpectSameCache;
using kvstate::testing::TestCache;

// The base: 30 tokens, every third evicted. After the turn (40 tokens): some base entries gone,
// the new ones kept, and position 3 (cold in the base) recalled.
model::KvCache Base() {
  return TestCache(30, [](int32_t p, int32_t l, int32_t h) { return (p + l + h) % 3 != 0; });
}
model::KvCache After() {
  return TestCache(40, [](int32_t p, int32_t l, int32_t h) {
    if (p >= 30 || p == 3) return true;
    return (p + l + h) % 3 != 0 && p % 5 != 1;
  });
}

kvstate::EncodedState Encode(const model::KvCache& cache) {
  return *kvstate::EncodeState({.retained = &cache}, kvstate::testing::TestIdentity(40),
                               {.page_tokens = 4});
}

TEST(PrefillDeltaTest, TheDeltaTurnsTheBaseIntoThePrefilledState) {
  const model::KvCache base = Base(), after = After();
  const kvstate::StateKey key =
      kvstate::MakeStateKey(kvstate::testing::TestNamespace(), std::vector<int32_t>{1, 2});
  Delta delta = *MakeDelta(HeadPositions(base), key, after);
  // Only what the base lacks travels: the 10 new tokens and the recalled position 3 (where the
  // base had evicted it) per head.
  EXPECT_LT(delta.added.TotalEntries(), after.TotalEntries() / 2);
  EXPECT_EQ(delta.added.positions(0, 0).front(), 3);  // (3 + 0 + 0) % 3 == 0: was cold
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
  Delta delta = *MakeDelta(HeadPositions(Base()), {}, after);
  const kvstate::EncodedState added = Encode(delta.added);
  // Missing a position the delta drops (every base head loses position 1 or 6 ...).
  model::KvCache fewer = TestCache(
      30, [](int32_t p, int32_t l, int32_t h) { return (p + l + h) % 3 != 0 && p % 5 != 1; });
  const model::KvCache fewer_before = *fewer.Clone();
  absl::Status st = ApplyDelta(delta.base, added.manifest, added.pages(), fewer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  ExpectSameCache(fewer, fewer_before);
  // Holding an extra entry the base did not: the heads would not end as the prefill kept them.
  model::KvCache more =
      TestCache(30, [](int32_t p, int32_t l, int32_t h) { return (p + l + h) % 3 != 0 || p == 9; });
  const model::KvCache more_before = *more.Clone();
  st = ApplyDelta(delta.base, added.manifest, added.pages(), more);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  ExpectSameCache(more, more_before);
}

TEST(PrefillDeltaTest, CorruptOrTruncatedBasesAreDataLoss) {
  Delta delta = *MakeDelta(HeadPositions(Base()), {}, After());
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
