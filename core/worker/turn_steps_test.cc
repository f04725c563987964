// AddEviction: a turn's later evictions (decode-time) join its cold tier in position order, each
// entry with its own score, and the retained scores become the latest eviction's.
#include "core/worker/turn_steps.h"

#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

// One layer, one kv-head, head_dim 1: key = value = position.
eviction::EvictionResult OneHead(std::vector<int32_t> evicted, std::vector<float> evicted_scores,
                                 std::vector<float> scores, std::vector<int64_t> kept) {
  eviction::EvictionResult r;
  model::KvHead head;
  for (int32_t p : evicted) {
    head.keys.push_back(static_cast<float>(p));
    head.values.push_back(static_cast<float>(p));
  }
  head.positions = std::move(evicted);
  r.evicted = {{std::move(head)}};
  r.evicted_scores = {{std::move(evicted_scores)}};
  r.scores = {{std::move(scores)}};
  r.kept = {{std::move(kept)}};
  return r;
}

TEST(AddEvictionTest, LaterEvictionsMergeByPositionWithTheirScores) {
  TierScores tiers;
  AddEviction(tiers, OneHead({2, 7}, {0.2f, 0.7f}, {9, 0.2f, 8, 0.7f}, {0, 2}));
  ASSERT_EQ(tiers.evicted_entries.size(), 1u);
  EXPECT_EQ(tiers.retained[0], (std::vector<float>{9, 8}));
  AddEviction(tiers, OneHead({0, 5, 9}, {0.0f, 0.5f, 0.9f}, {0, 6, 0.5f, 0.9f}, {1}));
  EXPECT_EQ(tiers.evicted_entries[0].positions, (std::vector<int32_t>{0, 2, 5, 7, 9}));
  EXPECT_EQ(tiers.evicted_entries[0].keys, (std::vector<float>{0, 2, 5, 7, 9}));
  EXPECT_EQ(tiers.evicted[0], (std::vector<float>{0.0f, 0.2f, 0.5f, 0.7f, 0.9f}));
  EXPECT_EQ(tiers.retained[0], (std::vector<float>{6}));
}

}  // namespace
}  // namespace glimpse::worker
