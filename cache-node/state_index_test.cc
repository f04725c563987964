#include "cache-node/state_index.h"

#include <vector>

#include "gtest/gtest.h"

namespace glimpse::cache_node {
namespace {

const NamespaceKey kNs = kvstate::MakeNamespaceKey("t", kvstate::Fingerprint{}, "snapkv");
const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

std::vector<int32_t> Tokens(size_t n, int32_t salt = 0) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(i * 13 + salt);
  return t;
}

StateKey AddPrefix(StateIndex& idx, const std::vector<int32_t>& tokens, size_t n, uint64_t bytes,
                   absl::Time created, const NamespaceKey& ns = kNs) {
  StateKey k = kvstate::MakeStateKey(ns, std::span<const int32_t>(tokens).first(n));
  EXPECT_TRUE(idx.Add(k, StateInfo{ns, static_cast<uint32_t>(n), bytes, created, false}));
  return k;
}

TEST(StateIndexTest, LongestPrefix) {
  StateIndex idx;
  const auto t = Tokens(200);
  AddPrefix(idx, t, 32, 10, kT0);
  const StateKey k64 = AddPrefix(idx, t, 64, 10, kT0);
  const auto other = Tokens(200, 1);
  AddPrefix(idx, other, 100, 10, kT0);  // another conversation in the same namespace
  auto m = idx.LongestPrefix(kNs, t);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->token_count, 64u);
  EXPECT_EQ(m->key, k64);
  // Diverges after 40 tokens: only the 32-token state is a prefix.
  auto diverged = t;
  diverged[40] = -5;
  m = idx.LongestPrefix(kNs, diverged);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->token_count, 32u);
  // Shorter than every stored state, another namespace, nothing.
  EXPECT_FALSE(idx.LongestPrefix(kNs, std::span<const int32_t>(t).first(31)).has_value());
  const NamespaceKey ns2 = kvstate::MakeNamespaceKey("u", kvstate::Fingerprint{}, "snapkv");
  EXPECT_FALSE(idx.LongestPrefix(ns2, t).has_value());
  // Removing the 64 falls back to the 32.
  ASSERT_TRUE(idx.Remove(k64));
  EXPECT_EQ(idx.LongestPrefix(kNs, t)->token_count, 32u);
}

TEST(StateIndexTest, PlanPutDropsOldestUnpinnedThenFailsNamingSizes) {
  StateIndex idx;
  const auto t = Tokens(10);
  const StateKey a = AddPrefix(idx, t, 1, 100, kT0);
  const StateKey b = AddPrefix(idx, t, 2, 100, kT0 + absl::Seconds(1));
  const StateKey c = AddPrefix(idx, t, 3, 100, kT0 + absl::Seconds(2));
  RetentionLimits limits;
  limits.max_bytes = 350;
  auto plan = idx.PlanPut(50, 0, kT0, limits);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->empty());
  plan = idx.PlanPut(150, 0, kT0, limits);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, std::vector<StateKey>{a});
  ASSERT_TRUE(idx.SetPinned(a, true));
  plan = idx.PlanPut(150, 0, kT0, limits);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, std::vector<StateKey>{b});
  ASSERT_TRUE(idx.SetPinned(b, true));
  ASSERT_TRUE(idx.SetPinned(c, true));
  plan = idx.PlanPut(100, 0, kT0, limits);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("300 bytes stored, of which 300 pinned"),
            std::string::npos)
      << plan.status();
  EXPECT_NE(plan.status().message().find("max_bytes 350"), std::string::npos);
  EXPECT_EQ(idx.pinned_bytes(), 300u);
}

TEST(StateIndexTest, ExpiredByAgeSkipsPinned) {
  StateIndex idx;
  const auto t = Tokens(10);
  const StateKey a = AddPrefix(idx, t, 1, 100, kT0);
  const StateKey b = AddPrefix(idx, t, 2, 100, kT0 + absl::Seconds(30));
  AddPrefix(idx, t, 3, 100, kT0 + absl::Seconds(90));
  RetentionLimits limits;
  limits.max_age = absl::Seconds(60);
  EXPECT_EQ(idx.Expired(kT0 + absl::Seconds(100), limits), (std::vector<StateKey>{a, b}));
  ASSERT_TRUE(idx.SetPinned(a, true));
  EXPECT_EQ(idx.Expired(kT0 + absl::Seconds(100), limits), (std::vector<StateKey>{b}));
  EXPECT_TRUE(idx.Expired(kT0 + absl::Seconds(100), RetentionLimits{}).empty());
}

}  // namespace
}  // namespace glimpse::cache_node
