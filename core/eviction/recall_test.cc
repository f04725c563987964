// Recall's pieces (recall.h): the summary bound against exact logits, page choice, merging.
#include "core/eviction/recall.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace glimpse::eviction {
namespace {

model::KvHead RandomHead(int64_t n, int64_t hd, uint32_t seed, int32_t first_position = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  model::KvHead head;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < hd; ++c) {
      head.keys.push_back(normal(rng));
      head.values.push_back(normal(rng));
    }
    head.positions.push_back(first_position + static_cast<int32_t>(3 * j));
  }
  return head;
}

float Dot(const float* a, const float* b, int64_t hd) {
  float s = 0.0f;
  for (int64_t c = 0; c < hd; ++c) s += a[c] * b[c];
  return s;
}

TEST(RecallTest, PageBoundIsAnUpperBoundThatOneEntryMeets) {
  constexpr int64_t kHd = 7, kRows = 5;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const model::KvHead cold = RandomHead(19, kHd, seed);
    const model::KvHead q_head = RandomHead(kRows, kHd, seed + 100);
    const RecallQueries queries{.data = q_head.keys.data(), .rows = kRows, .head_dim = kHd};
    for (int64_t begin = 0; begin < cold.size(); begin += 4) {
      const int64_t end = std::min<int64_t>(begin + 4, cold.size());
      float exact = -INFINITY;
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t j = begin; j < end; ++j) {
          exact = std::max(exact, Dot(&q_head.keys[r * kHd], &cold.keys[j * kHd], kHd));
        }
      }
      EXPECT_GE(PageBound(cold, begin, end, queries), exact - 1e-5f) << "seed " << seed;
    }
    // A page of one entry: the bound is that entry's best logit.
    float one = -INFINITY;
    for (int64_t r = 0; r < kRows; ++r)
      one = std::max(one, Dot(&q_head.keys[r * kHd], &cold.keys[0], kHd));
    EXPECT_NEAR(PageBound(cold, 0, 1, queries), one, 1e-5f);
  }
}

TEST(RecallTest, AbsentQueryRowsAreSkipped) {
  constexpr int64_t kHd = 4;
  const model::KvHead cold = RandomHead(8, kHd, 3);
  std::vector<float> q(2 * kHd, std::nanf(""));
  const RecallQueries none{.data = q.data(), .rows = 2, .head_dim = kHd};
  EXPECT_EQ(PageBound(cold, 0, 8, none), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(PickCandidates(cold, none, 8, 4).empty());
  std::fill(q.begin() + kHd, q.end(), 1.0f);  // row 1 present
  const RecallQueries one{.data = q.data(), .rows = 2, .head_dim = kHd};
  EXPECT_GT(PageBound(cold, 0, 8, one), -std::numeric_limits<float>::infinity());
}

// A key planted along the query puts its page first; candidates are whole pages, in row order.
TEST(RecallTest, PicksThePageHoldingTheKeyTheQueryPointsAt) {
  constexpr int64_t kHd = 16, kPage = 8;
  model::KvHead cold = RandomHead(50, kHd, 7);
  for (float& k : cold.keys) k *= 0.1f;
  std::vector<float> q(kHd, 0.0f);
  q[3] = 1.0f;
  cold.keys[37 * kHd + 3] = 10.0f;  // row 37: page [32, 40)
  const RecallQueries queries{.data = q.data(), .rows = 1, .head_dim = kHd};
  std::vector<int64_t> rows = PickCandidates(cold, queries, 5, kPage);
  std::vector<int64_t> want(kPage);
  for (int64_t j = 0; j < kPage; ++j) want[j] = 32 + j;
  EXPECT_EQ(rows, want);
  rows = PickCandidates(cold, queries, 9, kPage);  // two pages
  EXPECT_EQ(rows.size(), 2 * kPage);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_TRUE(std::binary_search(rows.begin(), rows.end(), 37));
  EXPECT_EQ(PickCandidates(cold, queries, 1000, kPage).size(), 50u);  // all, the short page too
  EXPECT_TRUE(PickCandidates(cold, queries, 0, kPage).empty());
}

TEST(RecallTest, AddMissingEntriesMergesByPositionAndSkipsHeldOnes) {
  constexpr int64_t kHd = 2;
  auto head = [](std::vector<int32_t> positions) {
    model::KvHead h;
    for (int32_t p : positions) {
      h.positions.push_back(p);
      h.keys.insert(h.keys.end(), {static_cast<float>(p), 0.5f});
      h.values.insert(h.values.end(), {-static_cast<float>(p), 1.5f});
    }
    return h;
  };
  model::KvHead into = head({1, 4, 9});
  AddMissingEntries(into, head({0, 4, 5, 7, 12}), head({7}));
  const model::KvHead want = head({0, 1, 4, 5, 9, 12});
  EXPECT_EQ(into.positions, want.positions);
  EXPECT_EQ(into.keys, want.keys);
  EXPECT_EQ(into.values, want.values);
  EXPECT_EQ(static_cast<int64_t>(into.keys.size()), into.size() * kHd);

  const model::KvHead rows = Rows(want, std::vector<int64_t>{1, 4});
  EXPECT_EQ(rows.positions, (std::vector<int32_t>{1, 9}));
  EXPECT_EQ(rows.keys, (std::vector<float>{1.0f, 0.5f, 9.0f, 0.5f}));
}

}  // namespace
}  // namespace glimpse::eviction
