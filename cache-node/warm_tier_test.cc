#include "cache-node/warm_tier.h"

#include "gtest/gtest.h"

namespace glimpse::cache_node {
namespace {

std::shared_ptr<WarmState> Entry(uint8_t id, size_t bytes, float importance) {
  kvstate::Manifest m;
  m.state_key[0] = id;
  kvstate::PageRef ref;
  ref.importance = importance;
  m.pages.push_back(ref);
  const std::vector<uint8_t> page(bytes, 'x');
  const std::span<const uint8_t> spans[] = {page};
  return WarmState::Make(std::move(m), spans);
}

kvstate::StateKey Key(uint8_t id) {
  kvstate::StateKey k{};
  k[0] = id;
  return k;
}

TEST(WarmTierTest, ScoreFormula) {
  EXPECT_DOUBLE_EQ(WarmTier::Score(0.8, absl::ZeroDuration(), absl::Seconds(10)), 0.8);
  EXPECT_DOUBLE_EQ(WarmTier::Score(0.8, absl::Seconds(10), absl::Seconds(10)), 0.4);
  EXPECT_DOUBLE_EQ(WarmTier::Score(0.8, absl::Seconds(30), absl::Seconds(10)), 0.1);
  EXPECT_DOUBLE_EQ(Entry(1, 1, 0.0f)->weight(), 0.1);
  EXPECT_DOUBLE_EQ(Entry(1, 1, 1.0f)->weight(), 1.0);
}

TEST(WarmTierTest, ImportantStateOutlivesAnOlderUnimportantOneNotPlainLru) {
  FakeClock clock;
  WarmTier warm(300, absl::Seconds(10), &clock);
  ASSERT_TRUE(warm.Admit(Entry(1, 100, 1.0f)));  // important, used first
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(warm.Admit(Entry(2, 100, 0.0f)));  // unimportant, more recent
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(warm.Admit(Entry(3, 100, 0.5f)));
  clock.Advance(absl::Seconds(1));
  // LRU would evict 1; importance × recency evicts 2 (0.1·2^-0.2 < 1·2^-0.3).
  ASSERT_TRUE(warm.Admit(Entry(4, 100, 0.5f)));
  EXPECT_TRUE(warm.Contains(Key(1)));
  EXPECT_FALSE(warm.Contains(Key(2)));
  EXPECT_TRUE(warm.Contains(Key(3)));
  EXPECT_EQ(warm.stats().bytes, 300u);
  EXPECT_EQ(warm.stats().evicted, 1u);
}

TEST(WarmTierTest, RecencyDecaysImportance) {
  FakeClock clock;
  WarmTier warm(200, absl::Seconds(10), &clock);
  ASSERT_TRUE(warm.Admit(Entry(1, 100, 1.0f)));
  ASSERT_TRUE(warm.Admit(Entry(2, 100, 0.6f)));
  clock.Advance(absl::Seconds(100));             // 10 half-lives: both scores ≈ 0.001
  ASSERT_TRUE(warm.Admit(Entry(3, 100, 0.0f)));  // a fresh unimportant state (0.1) wins
  EXPECT_TRUE(warm.Contains(Key(1)));            // 2 had the lower score
  EXPECT_FALSE(warm.Contains(Key(2)));
}

TEST(WarmTierTest, NewcomerWithLowerScoreIsRejectedAndNothingEvicted) {
  FakeClock clock;
  WarmTier warm(200, absl::Seconds(10), &clock);
  ASSERT_TRUE(warm.Admit(Entry(1, 100, 1.0f)));
  ASSERT_TRUE(warm.Admit(Entry(2, 100, 1.0f)));
  EXPECT_FALSE(warm.Admit(Entry(3, 150, 0.0f)));
  EXPECT_TRUE(warm.Contains(Key(1)));
  EXPECT_TRUE(warm.Contains(Key(2)));
  EXPECT_FALSE(warm.Admit(Entry(4, 201, 1.0f)));  // larger than the budget
  EXPECT_EQ(warm.stats().rejected, 2u);
}

TEST(WarmTierTest, PinnedEntriesAreNeverEvicted) {
  FakeClock clock;
  WarmTier warm(200, absl::Seconds(10), &clock);
  ASSERT_TRUE(warm.Admit(Entry(1, 100, 0.0f)));
  ASSERT_TRUE(warm.SetPinned(Key(1), true));
  ASSERT_TRUE(warm.AdmitPinned(Entry(2, 100, 0.0f)));
  clock.Advance(absl::Hours(1));
  EXPECT_FALSE(warm.Admit(Entry(3, 100, 1.0f)));  // everything is pinned
  EXPECT_TRUE(warm.Contains(Key(1)));
  EXPECT_TRUE(warm.Contains(Key(2)));
  ASSERT_TRUE(warm.SetPinned(Key(1), false));
  EXPECT_TRUE(warm.Admit(Entry(3, 100, 1.0f)));
  EXPECT_FALSE(warm.Contains(Key(1)));
  EXPECT_EQ(warm.stats().pinned_entries, 1u);
}

TEST(WarmTierTest, GetCountsHitsAndMissesAndRefreshesRecency) {
  FakeClock clock;
  WarmTier warm(200, absl::Seconds(10), &clock);
  ASSERT_TRUE(warm.Admit(Entry(1, 100, 0.5f)));
  ASSERT_TRUE(warm.Admit(Entry(2, 100, 0.5f)));
  clock.Advance(absl::Seconds(20));
  EXPECT_NE(warm.Get(Key(1)), nullptr);  // 1 is fresh again, 2 is not
  EXPECT_EQ(warm.Get(Key(9)), nullptr);
  ASSERT_TRUE(warm.Admit(Entry(3, 100, 0.5f)));
  EXPECT_TRUE(warm.Contains(Key(1)));
  EXPECT_FALSE(warm.Contains(Key(2)));
  EXPECT_EQ(warm.stats().hits, 1u);
  EXPECT_EQ(warm.stats().misses, 1u);
}

}  // namespace
}  // namespace glimpse::cache_node
