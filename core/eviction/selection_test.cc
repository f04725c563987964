#include "core/eviction/selection.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::eviction {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Scores = std::vector<std::vector<float>>;
using Row = std::vector<int64_t>;

// T = 10, Hkv = 2, L = 3; with sinks = 1 and window = 2 the forced entries are {0, 8, 9} (F = 3),
// so only indices 1..7 compete. Rows listed as [layer][head], 10 scores each.
constexpr int64_t kT = 10;
constexpr int32_t kHeads = 2;
Scores SmallScores() {
  const std::vector<std::vector<float>> rows = {
      {9, 1, 8, 2, 7, 3, 6, 4, 0, 0}, {0, 5, 5, 9, 1, 1, 8, 2, 0, 0},  // layer 0
      {0, 3, 1, 4, 1, 5, 9, 2, 6, 5}, {0, 9, 9, 0, 9, 0, 0, 0, 0, 0},  // layer 1
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 7, 7, 7, 7, 1, 1, 1, 1, 1},  // layer 2
  };
  Scores s(3);
  for (size_t r = 0; r < rows.size(); ++r) {
    s[r / 2].insert(s[r / 2].end(), rows[r].begin(), rows[r].end());
  }
  return s;
}

SelectionOptions SmallOptions(Granularity g, Schedule s) {
  SelectionOptions o;
  o.budget_tokens = 5;
  o.sinks = 1;
  o.window = 2;
  o.granularity = g;
  o.schedule = s;
  return o;
}

KeptEntries MustSelect(const Scores& scores, int64_t t, int32_t heads, const SelectionOptions& o,
                       const std::vector<double>& pref = {}) {
  auto kept = Select(scores, t, heads, o, pref);
  EXPECT_TRUE(kept.ok()) << kept.status();
  return kept.ok() ? *kept : KeptEntries{};
}

// ---- Hand-computed cases: every granularity × schedule on SmallScores (C = 5). ----
// Pyramid as kvpress (W = 2, x = 5, β = 20): cap = 7, min = 5/20 = 0.25, max = 10 − 0.25 = 9.75
// >= T − W = 8, so max = 8, min = 10 − 8 = 2; 10 >= 8 >= 2 >= 2 holds; steps = 6/2 = 3 →
// [8, 5, 2]; layer 2 raised to F = 3 (sinks = 1) → [8, 5, 3], Σ = 16 (kvpress does not re-level).
// CAKE with P = [1, 1, 2]: shares 3.75, 3.75, 7.5 → floors [3, 3, 7], 2 left to the largest
// fractions (layers 0, 1) → [4, 4, 7].
const std::vector<double> kCakePref = {1, 1, 2};

TEST(SelectHandTest, PerHeadUniform) {
  const auto k = MustSelect(SmallScores(), kT, kHeads,
                            SmallOptions(Granularity::kPerHead, Schedule::kUniform));
  EXPECT_EQ(k, (KeptEntries{{Row{0, 2, 4, 8, 9}, Row{0, 3, 6, 8, 9}},
                            {Row{0, 5, 6, 8, 9}, Row{0, 1, 2, 8, 9}},  // ties 9,9,9 → 1, 2
                            {Row{0, 6, 7, 8, 9}, Row{0, 1, 2, 8, 9}}}));
}

TEST(SelectHandTest, PerHeadPyramid) {
  const auto k = MustSelect(SmallScores(), kT, kHeads,
                            SmallOptions(Granularity::kPerHead, Schedule::kPyramid));
  EXPECT_EQ(k, (KeptEntries{{Row{0, 2, 4, 5, 6, 7, 8, 9}, Row{0, 1, 2, 3, 6, 7, 8, 9}},
                            {Row{0, 5, 6, 8, 9}, Row{0, 1, 2, 8, 9}},
                            {Row{0, 8, 9}, Row{0, 8, 9}}}));
}

TEST(SelectHandTest, PerHeadCake) {
  const auto k = MustSelect(SmallScores(), kT, kHeads,
                            SmallOptions(Granularity::kPerHead, Schedule::kCake), kCakePref);
  EXPECT_EQ(k, (KeptEntries{{Row{0, 2, 8, 9}, Row{0, 3, 8, 9}},
                            {Row{0, 6, 8, 9}, Row{0, 1, 8, 9}},
                            {Row{0, 4, 5, 6, 7, 8, 9}, Row{0, 1, 2, 3, 4, 8, 9}}}));
}

// AdaKV, α = 0.2: n_safe = ⌊0.2·5⌋ = 1 <= F, so each layer picks 2·(5 − 3) = 4 from both heads.
// Layer 1: the 9s are h0 i6, h1 i1, i2, i4 (rows before indices on ties) → head 1 keeps 6.
TEST(SelectHandTest, PerLayerUniform) {
  const auto k = MustSelect(SmallScores(), kT, kHeads,
                            SmallOptions(Granularity::kPerLayer, Schedule::kUniform));
  EXPECT_EQ(k, (KeptEntries{{Row{0, 2, 4, 8, 9}, Row{0, 3, 6, 8, 9}},
                            {Row{0, 6, 8, 9}, Row{0, 1, 2, 4, 8, 9}},
                            {Row{0, 7, 8, 9}, Row{0, 1, 2, 3, 8, 9}}}));
}

// Pyramid [8, 5, 3]: layer 0 picks 2·(8 − 3) = 10 of its 14 free entries: 9 (h1 i3), 8 (h0 i2,
// h1 i6), 7, 6 (h0 i4, i6), 5 (h1 i1, i2), 4, 3 (h0 i7, i5) and, of the two 2s, h0 i3 (lower row).
TEST(SelectHandTest, PerLayerPyramid) {
  const auto k = MustSelect(SmallScores(), kT, kHeads,
                            SmallOptions(Granularity::kPerLayer, Schedule::kPyramid));
  EXPECT_EQ(k, (KeptEntries{{Row{0, 2, 3, 4, 5, 6, 7, 8, 9}, Row{0, 1, 2, 3, 6, 8, 9}},
                            {Row{0, 6, 8, 9}, Row{0, 1, 2, 4, 8, 9}},
                            {Row{0, 8, 9}, Row{0, 8, 9}}}));
}

TEST(SelectHandTest, PerLayerCake) {
  const auto k = MustSelect(SmallScores(), kT, kHeads,
                            SmallOptions(Granularity::kPerLayer, Schedule::kCake), kCakePref);
  EXPECT_EQ(k, (KeptEntries{{Row{0, 2, 8, 9}, Row{0, 3, 8, 9}},
                            {Row{0, 6, 8, 9}, Row{0, 1, 8, 9}},
                            {Row{0, 4, 5, 6, 7, 8, 9}, Row{0, 1, 2, 3, 4, 8, 9}}}));
}

// Global, α = 0.2: no safeguard beyond F, so one top-12 over all six rows: five 9s, two 8s and
// the first five of six 7s in (layer, head, index) order — L2 h1 i4 is the one left out.
const KeptEntries kGlobalSmall = {{Row{0, 2, 4, 8, 9}, Row{0, 3, 6, 8, 9}},
                                  {Row{0, 6, 8, 9}, Row{0, 1, 2, 4, 8, 9}},
                                  {Row{0, 7, 8, 9}, Row{0, 1, 2, 3, 8, 9}}};

TEST(SelectHandTest, GlobalUniform) {
  EXPECT_EQ(
      MustSelect(SmallScores(), kT, kHeads, SmallOptions(Granularity::kGlobal, Schedule::kUniform)),
      kGlobalSmall);
}

// In global mode the schedule only sets each layer's safeguard ⌊α·B_l⌋ and the total Hkv·Σ_l B_l.
// Pyramid [8, 5, 3] sums to 16, not 15: with α = 0.2 no safeguard exceeds F, so the top-14 is the
// uniform top-12, the sixth 7 (L2 h1 i4) and the first 6 (L0 h0 i6). With α = 1 every head is
// guaranteed its whole layer budget, i.e. the per-head result.
TEST(SelectHandTest, GlobalPyramid) {
  auto o = SmallOptions(Granularity::kGlobal, Schedule::kPyramid);
  EXPECT_EQ(MustSelect(SmallScores(), kT, kHeads, o),
            (KeptEntries{{Row{0, 2, 4, 6, 8, 9}, Row{0, 3, 6, 8, 9}},
                         {Row{0, 6, 8, 9}, Row{0, 1, 2, 4, 8, 9}},
                         {Row{0, 7, 8, 9}, Row{0, 1, 2, 3, 4, 8, 9}}}));
  o.safeguard = 1.0;
  EXPECT_EQ(MustSelect(SmallScores(), kT, kHeads, o),
            MustSelect(SmallScores(), kT, kHeads,
                       SmallOptions(Granularity::kPerHead, Schedule::kPyramid)));
}

TEST(SelectHandTest, GlobalCake) {
  auto o = SmallOptions(Granularity::kGlobal, Schedule::kCake);
  EXPECT_EQ(MustSelect(SmallScores(), kT, kHeads, o, kCakePref), kGlobalSmall);
  o.safeguard = 1.0;
  EXPECT_EQ(MustSelect(SmallScores(), kT, kHeads, o, kCakePref),
            MustSelect(SmallScores(), kT, kHeads,
                       SmallOptions(Granularity::kPerHead, Schedule::kCake), kCakePref));
}

// The safeguard matters when one head dominates: T = 6, no forced entries, C = 3, α = 0.5 →
// n_safe = 1 per head; the remaining 4 all go to head 0. Without it head 1 keeps nothing.
TEST(SelectHandTest, SafeguardKeepsEachHeadsBest) {
  const Scores s = {{9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6}};
  SelectionOptions o;
  o.budget_tokens = 3;
  o.sinks = 0;
  o.window = 0;
  for (Granularity g : {Granularity::kPerLayer, Granularity::kGlobal}) {
    o.granularity = g;
    o.safeguard = 0.5;
    EXPECT_EQ(MustSelect(s, 6, 2, o), (KeptEntries{{Row{0, 1, 2, 3, 4}, Row{5}}}));
    o.safeguard = 0.0;
    EXPECT_EQ(MustSelect(s, 6, 2, o), (KeptEntries{{Row{0, 1, 2, 3, 4, 5}, Row{}}}));
  }
}

// CAKE clamping: P = [1, 4, 5], C = 5 → shares 1.5, 6, 7.5; layer 0 is raised to F = 3 and the
// other 12 re-shared 4:5 → 5.33, 6.67 → [3, 5, 7]. P = [1, 1, 10], C = 8 → 2, 2, 20: layer 2 is
// capped at T = 10 and 14 re-shared → [7, 7, 10].
std::vector<int64_t> LayerCounts(const KeptEntries& k) {
  std::vector<int64_t> out;
  for (const auto& layer : k) out.push_back(static_cast<int64_t>(layer[0].size()));
  return out;
}

TEST(SelectHandTest, CakeClampsAndRedistributes) {
  auto o = SmallOptions(Granularity::kPerHead, Schedule::kCake);
  EXPECT_THAT(LayerCounts(MustSelect(SmallScores(), kT, kHeads, o, {1, 4, 5})),
              ElementsAre(3, 5, 7));
  o.budget_tokens = 8;
  EXPECT_THAT(LayerCounts(MustSelect(SmallScores(), kT, kHeads, o, {1, 1, 10})),
              ElementsAre(7, 7, 10));
}

Scores RandomScores(std::mt19937& rng, int64_t layers, int64_t heads, int64_t t, int levels) {
  std::uniform_int_distribution<int> d(0, levels - 1);  // few levels → many ties
  Scores s(layers, std::vector<float>(heads * t));
  for (auto& layer : s) {
    for (float& v : layer) v = static_cast<float>(d(rng)) * 0.5f - 3.0f;
  }
  return s;
}

// kvpress pyramidkv_press.py's numbers (sinks = 0; worked in Python with get_layer_budget).
//  T = 1000, W = 4, x = 100, β = 8, L = 4: min = 12.5, max = 187.5 < T − W, 1000 >= 187.5 >= 12.5
//    >= 4; steps = 175/3 = 58.33 → round(187.5, 129.17, 70.83, 12.5) = [188, 129, 71, 12]
//    (halves to even: 187.5 → 188, 12.5 → 12).
//  T = 100, W = 10, x = 60, β = 20, L = 3: max = 117 >= T − W = 90 → max = 90, min = 120 − 90 =
//    30; steps = 30 → [90, 60, 30].
//  T = 1000, W = 32, x = 100, β = 20, L = 4: min = 5 < W → SnapKV fallback, [100, 100, 100, 100].
//  T = 10, W = 1, ratio 0.25 (x = 2.5), L = 2: min = 0.125 < W → fallback round(2.5) = 2 per layer,
//    where the uniform schedule's C = llround(2.5) = 3.
TEST(SelectHandTest, PyramidFollowsKvpress) {
  std::mt19937 rng(7);
  SelectionOptions o;
  o.sinks = 0;
  o.window = 4;
  o.budget_tokens = 100;
  o.pyramid_beta = 8;
  o.schedule = Schedule::kPyramid;
  EXPECT_THAT(LayerCounts(MustSelect(RandomScores(rng, 4, 1, 1000, 50), 1000, 1, o)),
              ElementsAre(188, 129, 71, 12));
  o.window = 10;
  o.budget_tokens = 60;
  o.pyramid_beta = 20;
  EXPECT_THAT(LayerCounts(MustSelect(RandomScores(rng, 3, 2, 100, 50), 100, 2, o)),
              ElementsAre(90, 60, 30));
  o.window = 32;
  o.budget_tokens = 100;
  EXPECT_THAT(LayerCounts(MustSelect(RandomScores(rng, 4, 1, 1000, 50), 1000, 1, o)),
              ElementsAre(100, 100, 100, 100));
  o.window = 1;
  o.budget_tokens = 0;
  o.budget_ratio = 0.25;
  EXPECT_THAT(LayerCounts(MustSelect(RandomScores(rng, 2, 1, 10, 50), 10, 1, o)),
              ElementsAre(2, 2));
  o.schedule = Schedule::kUniform;
  EXPECT_THAT(LayerCounts(MustSelect(RandomScores(rng, 2, 1, 10, 50), 10, 1, o)),
              ElementsAre(3, 3));
}

// The budgets kvpress 0.5.5 recorded in tests/fixtures/kvpress/pyramidkv_cr0.5.json (T = 294,
// W = 32, β = 20, L = 30, compression 0.5 → ratio 0.5): x = 147, max = 286.65 >= 262 → max = 262,
// min = 32; steps = 230/29. With compression 0.8 (x = 58.8) min = 2.94 < W: round(58.8) = 59 each,
// Σ = 1770 where x·L = 1764.
TEST(SelectHandTest, PyramidMatchesKvpressFixtureBudgets) {
  std::mt19937 rng(5);
  const Scores s = RandomScores(rng, 30, 1, 294, 50);
  SelectionOptions o;
  o.sinks = 0;
  o.window = 32;
  o.budget_ratio = 1.0 - 0.5;
  o.schedule = Schedule::kPyramid;
  EXPECT_THAT(LayerCounts(MustSelect(s, 294, 1, o)),
              ElementsAre(262, 254, 246, 238, 230, 222, 214, 206, 199, 191, 183, 175, 167, 159, 151,
                          143, 135, 127, 119, 111, 103, 95, 88, 80, 72, 64, 56, 48, 40, 32));
  o.budget_ratio = 1.0 - 0.8;
  EXPECT_EQ(LayerCounts(MustSelect(s, 294, 1, o)), std::vector<int64_t>(30, 59));
}

// ---- Budgets, forced entries, overlap. ----
TEST(SelectTest, RatioRoundsHalfAwayFromZeroAndIsAtLeastOne) {
  SelectionOptions o;
  o.sinks = 0;
  o.window = 0;
  const Scores s = {std::vector<float>(10, 1.0f)};
  o.budget_ratio = 0.25;  // 2.5 → 3
  EXPECT_EQ(MustSelect(s, 10, 1, o)[0][0], (Row{0, 1, 2}));
  o.budget_ratio = 0.01;  // 0.1 → 0 → at least 1
  EXPECT_EQ(MustSelect(s, 10, 1, o)[0][0], (Row{0}));
}

TEST(SelectTest, BudgetAtOrAboveTKeepsEverything) {
  std::mt19937 rng(3);
  const Scores s = RandomScores(rng, 2, 2, 7, 5);
  for (Schedule sch : {Schedule::kUniform, Schedule::kPyramid, Schedule::kCake}) {
    for (int64_t tokens : {7, 50}) {
      SelectionOptions o;
      o.budget_tokens = tokens;
      o.schedule = sch;
      o.granularity = Granularity::kGlobal;
      const Row all = {0, 1, 2, 3, 4, 5, 6};
      EXPECT_EQ(MustSelect(s, 7, 2, o, {1, 3}), (KeptEntries(2, {all, all})));
    }
  }
}

TEST(SelectTest, OverlappingSinksAndWindowCountOnce) {
  const Scores s = {std::vector<float>(12, 0.0f)};
  SelectionOptions o;
  o.sinks = 4;
  o.window = 6;
  o.budget_tokens = 10;  // forced = 10 < T = 12: exactly the forced entries
  EXPECT_EQ(MustSelect(s, 12, 1, o)[0][0], (Row{0, 1, 2, 3, 6, 7, 8, 9, 10, 11}));
  o.window = 32;  // default window longer than T: everything is forced
  o.budget_ratio = 1.0;
  o.budget_tokens = 0;
  EXPECT_EQ(MustSelect(s, 12, 1, o)[0][0].size(), 12u);
}

// ---- Errors name the offending value. ----
TEST(SelectErrorTest, BadInputsNameTheValue) {
  const Scores s = SmallScores();
  auto expect_error = [&](const SelectionOptions& o, const std::string& needle,
                          const Scores& scores = SmallScores(), std::vector<double> pref = {}) {
    auto r = Select(scores, kT, kHeads, o, pref);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(needle));
  };
  SelectionOptions none;
  expect_error(none, "exactly one");
  SelectionOptions both;
  both.budget_ratio = 0.5;
  both.budget_tokens = 5;
  expect_error(both, "budget_ratio=0.5, budget_tokens=5");
  SelectionOptions small;
  small.budget_tokens = 2;
  small.sinks = 1;
  small.window = 2;
  expect_error(small, "C=2");
  expect_error(small, "sinks=1 + window=2 -> 3");
  SelectionOptions ratio;
  ratio.budget_ratio = 1.5;
  expect_error(ratio, "budget_ratio=1.5");
  SelectionOptions neg;
  neg.budget_tokens = -3;
  expect_error(neg, "budget_tokens=-3");

  SelectionOptions ok = SmallOptions(Granularity::kPerHead, Schedule::kUniform);
  Scores nan = SmallScores();
  nan[1][13] = std::numeric_limits<float>::quiet_NaN();
  expect_error(ok, "scores[1] head 1 entry 3 is nan", nan);
  Scores inf = SmallScores();
  inf[2][0] = std::numeric_limits<float>::infinity();
  expect_error(ok, "scores[2] head 0 entry 0 is inf", inf);
  Scores short_layer = SmallScores();
  short_layer[2].pop_back();
  expect_error(ok, "scores[2] has 19 values, expected Hkv·T = 2·10 = 20", short_layer);

  SelectionOptions cake = SmallOptions(Granularity::kPerHead, Schedule::kCake);
  expect_error(cake, "got 0 for L=3");
  expect_error(cake, "layer_preference[1]=0", s, {1, 0, 1});
  SelectionOptions beta = SmallOptions(Granularity::kPerHead, Schedule::kPyramid);
  beta.pyramid_beta = 0.5;
  expect_error(beta, "pyramid_beta=0.5");
  SelectionOptions guard = ok;
  guard.safeguard = 1.5;
  expect_error(guard, "safeguard=1.5");

  EXPECT_THAT(std::string(Select({}, kT, kHeads, ok).status().message()), HasSubstr("no layers"));
  EXPECT_THAT(std::string(Select(s, kT, 0, ok).status().message()), HasSubstr("n_kv_heads=0"));
  EXPECT_THAT(std::string(Select(s, 0, kHeads, ok).status().message()), HasSubstr("n_tokens=0"));
}

// ---- Properties over random inputs (fixed seeds). ----
struct Case {
  int64_t t, layers, sinks, window, forced, c;
  int32_t heads;
  SelectionOptions o;
  Scores scores;
  std::vector<double> pref;
};

Case RandomCase(std::mt19937& rng, Granularity g, Schedule sch) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Case k;
  k.t = uni(1, 80);
  k.heads = static_cast<int32_t>(uni(1, 4));
  k.layers = uni(1, 7);
  k.sinks = uni(0, 6);
  k.window = uni(0, 12);
  k.forced = std::min(k.t, k.sinks + k.window);
  k.o.sinks = k.sinks;
  k.o.window = k.window;
  k.o.granularity = g;
  k.o.schedule = sch;
  k.o.safeguard = std::uniform_real_distribution<double>(0.0, 0.6)(rng);
  k.o.pyramid_beta = std::uniform_real_distribution<double>(1.0, 30.0)(rng);
  if (uni(0, 1) == 0) {
    k.o.budget_tokens = uni(std::max<int64_t>(1, k.forced), k.t + 3);
    k.c = std::min(k.o.budget_tokens, k.t);
  } else {
    const double lo = static_cast<double>(std::max<int64_t>(1, k.forced)) / k.t;
    k.o.budget_ratio = std::min(1.0, std::uniform_real_distribution<double>(lo, 1.0)(rng) + 0.01);
    k.c = std::max<int64_t>(1, std::llround(k.o.budget_ratio * k.t));
  }
  k.scores = RandomScores(rng, k.layers, k.heads, k.t, static_cast<int>(uni(2, 40)));
  for (int64_t l = 0; l < k.layers; ++l) {
    k.pref.push_back(std::uniform_real_distribution<double>(0.05, 5.0)(rng));
  }
  return k;
}

bool IsForced(const Case& k, int64_t i) { return i < k.sinks || i >= k.t - k.window; }

// (score desc, row asc, index asc), the order the selection promises.
bool Better(const Case& k, int64_t row_a, int64_t a, int64_t row_b, int64_t b) {
  const float sa = k.scores[row_a / k.heads][(row_a % k.heads) * k.t + a];
  const float sb = k.scores[row_b / k.heads][(row_b % k.heads) * k.t + b];
  if (sa != sb) return sa > sb;
  return row_a != row_b ? row_a < row_b : a < b;
}

// Each row's safeguard: its top max(0, ⌊α·B_l⌋ − F) non-forced entries (per-head: all it keeps).
std::set<int64_t> Guard(const Case& k, int64_t row, int64_t budget) {
  int64_t n = budget - k.forced;
  if (k.o.granularity != Granularity::kPerHead) {
    n = std::max<int64_t>(0, static_cast<int64_t>(std::floor(k.o.safeguard * budget)) - k.forced);
  }
  std::vector<int64_t> free;
  for (int64_t i = 0; i < k.t; ++i) {
    if (!IsForced(k, i)) free.push_back(i);
  }
  std::sort(free.begin(), free.end(),
            [&](int64_t a, int64_t b) { return Better(k, row, a, row, b); });
  return std::set<int64_t>(free.begin(), free.begin() + std::min<int64_t>(n, free.size()));
}

// `budgets` are the layer budgets B_l, read off a per-head run (the schedule is independent of the
// granularity).
void CheckProperties(const Case& k, const KeptEntries& kept, const std::vector<int64_t>& budgets) {
  ASSERT_EQ(static_cast<int64_t>(kept.size()), k.layers);
  int64_t total = 0;
  for (int64_t l = 0; l < k.layers; ++l) {
    int64_t in_layer = 0;
    for (const Row& r : kept[l]) in_layer += static_cast<int64_t>(r.size());
    if (k.o.granularity != Granularity::kGlobal) {
      ASSERT_EQ(in_layer, budgets[l] * k.heads);
    }
  }
  // Dropped entries and kept non-forced, non-safeguard entries, per top-k group.
  std::vector<std::pair<int64_t, int64_t>> dropped, chosen;
  for (int64_t row = 0; row < k.layers * k.heads; ++row) {
    const Row& r = kept[row / k.heads][row % k.heads];
    total += static_cast<int64_t>(r.size());
    ASSERT_LE(static_cast<int64_t>(r.size()), k.t);
    ASSERT_TRUE(std::adjacent_find(r.begin(), r.end(), std::greater_equal<>()) == r.end());
    ASSERT_TRUE(r.empty() || (r.front() >= 0 && r.back() < k.t));
    const std::set<int64_t> in(r.begin(), r.end());
    for (int64_t i = 0; i < k.t; ++i) {
      if (IsForced(k, i)) {
        ASSERT_TRUE(in.count(i)) << "forced " << i << " dropped";
      }
    }
    if (k.c >= k.t) continue;
    const auto guard = Guard(k, row, budgets[row / k.heads]);
    if (k.o.granularity == Granularity::kPerHead) {
      ASSERT_EQ(static_cast<int64_t>(r.size()), budgets[row / k.heads]);
    } else {
      ASSERT_GE(r.size(), k.forced + guard.size());
    }
    for (int64_t i : guard) ASSERT_TRUE(in.count(i)) << "safeguard entry " << i << " dropped";
    for (int64_t i = 0; i < k.t; ++i) {
      if (!in.count(i)) dropped.push_back({row, i});
      if (in.count(i) && !IsForced(k, i) && !guard.count(i)) chosen.push_back({row, i});
    }
  }
  const int64_t budget_sum = std::accumulate(budgets.begin(), budgets.end(), int64_t{0});
  ASSERT_EQ(total, budget_sum * k.heads) << "Hkv · Σ_l B_l";
  // Kept set = top scores: every chosen entry beats every dropped entry of its group.
  auto group = [&](int64_t row) {
    if (k.o.granularity == Granularity::kPerHead) return row;
    return k.o.granularity == Granularity::kPerLayer ? row / k.heads : int64_t{0};
  };
  for (const auto& [cr, ci] : chosen) {
    for (const auto& [dr, di] : dropped) {
      if (group(cr) == group(dr)) {
        ASSERT_TRUE(Better(k, cr, ci, dr, di));
      }
    }
  }
  if (k.c >= k.t || k.o.granularity != Granularity::kPerHead) return;
  for (int64_t b : budgets) ASSERT_TRUE(b >= k.forced && b <= k.t);
  if (k.o.schedule != Schedule::kPyramid) {
    ASSERT_EQ(budget_sum, k.c * k.layers) << "exact budget";
  } else {
    ASSERT_TRUE(std::is_sorted(budgets.rbegin(), budgets.rend())) << "pyramid must not increase";
    // kvpress's line through (max, min) averages x; each round() moves a layer by <= 1/2. Only
    // the forced floor (sinks > 0) may add more.
    const double x = k.o.budget_tokens != 0 ? static_cast<double>(k.c) : k.o.budget_ratio * k.t;
    if (k.sinks == 0) {
      ASSERT_LE(std::fabs(budget_sum - x * k.layers), 0.5 * k.layers + 1e-9);
    }
  }
  if (k.o.schedule == Schedule::kCake) {  // a larger preference never gets a smaller budget
    for (int64_t a = 0; a < k.layers; ++a) {
      for (int64_t b = 0; b < k.layers; ++b) {
        if (k.pref[a] > k.pref[b]) {
          ASSERT_GE(budgets[a], budgets[b]);
        }
      }
    }
  }
}

class SelectPropertyTest : public ::testing::TestWithParam<std::tuple<Granularity, Schedule>> {};

TEST_P(SelectPropertyTest, RandomInputs) {
  const auto [g, sch] = GetParam();
  std::mt19937 rng(1234 + 10 * static_cast<int>(g) + static_cast<int>(sch));
  for (int iter = 0; iter < 300; ++iter) {
    const Case k = RandomCase(rng, g, sch);
    SCOPED_TRACE(::testing::Message()
                 << "iter " << iter << " T=" << k.t << " Hkv=" << k.heads << " L=" << k.layers
                 << " sinks=" << k.sinks << " window=" << k.window << " C=" << k.c);
    auto kept = Select(k.scores, k.t, k.heads, k.o, k.pref);
    ASSERT_TRUE(kept.ok()) << kept.status();
    SelectionOptions per_head = k.o;
    per_head.granularity = Granularity::kPerHead;
    auto by_head = Select(k.scores, k.t, k.heads, per_head, k.pref);
    ASSERT_TRUE(by_head.ok()) << by_head.status();
    CheckProperties(k, *kept, LayerCounts(*by_head));
    auto again = Select(k.scores, k.t, k.heads, k.o, k.pref);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(*kept, *again) << "not deterministic";
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllModes, SelectPropertyTest,
    ::testing::Combine(::testing::Values(Granularity::kPerHead, Granularity::kPerLayer,
                                         Granularity::kGlobal),
                       ::testing::Values(Schedule::kUniform, Schedule::kPyramid, Schedule::kCake)));

// Pyramid budgets strictly decrease across a realistic shape (T = 2048, ratio 0.5, W = 32, β = 20,
// L = 16: min = 51.2 >= W, max = 1996.8 → [1997, 1867, …, 181, 51], Σ = 16384 = x·L here).
TEST(SelectTest, PyramidDecreasesAcrossLayers) {
  std::mt19937 rng(11);
  SelectionOptions o;
  o.budget_ratio = 0.5;
  o.schedule = Schedule::kPyramid;
  const auto counts = LayerCounts(MustSelect(RandomScores(rng, 16, 1, 2048, 100), 2048, 1, o));
  EXPECT_EQ(counts.front(), 1997);
  EXPECT_EQ(counts.back(), 51);
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), 1024 * 16);
  for (size_t l = 1; l < counts.size(); ++l) EXPECT_LT(counts[l], counts[l - 1]) << l;
}

}  // namespace
}  // namespace glimpse::eviction
