#include "core/kvstate/cache_pages.h"

#include <algorithm>
#include <cmath>

#include "core/kvstate/test_cache.h"
#include "core/kvstate/test_state.h"
#include "core/model/sequence.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::kvstate {
namespace {

using testing::AppendTestEntry;
using testing::ExpectSameCache;
using testing::TestIdentity;
constexpr int32_t kLayers = testing::kTestLayers, kHeads = testing::kTestKvHeads,
                  kDim = testing::kTestHeadDim;

// A session of `tokens` tokens after eviction: the retained cache and, per head, what was evicted.
// Head (l, h) keeps every position p with (p + l + h) % 3 != 0; head (1, 1) keeps nothing.
struct Evicted {
  model::KvCache retained{kLayers, kHeads, kDim};
  std::vector<model::KvHead> evicted = std::vector<model::KvHead>(kLayers * kHeads);
  model::KvCache full{kLayers, kHeads, kDim};
};

Evicted MakeEvicted(int32_t tokens) {
  Evicted e;
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t h = 0; h < kHeads; ++h) {
      for (int32_t p = 0; p < tokens; ++p) {
        const bool keep = (p + l + h) % 3 != 0 && !(l == 1 && h == 1);
        if (keep) {
          AppendTestEntry(&e.retained, l, h, p);
        } else {
          AppendTestEntry(&e.evicted[l * kHeads + h], p);
        }
        AppendTestEntry(&e.full, l, h, p);
      }
    }
  }
  return e;
}

TEST(CachePagesTest, RetainedAndEvictedRoundTripExactlyInFp16) {
  Evicted e = MakeEvicted(100);
  StateContent content{.retained = &e.retained, .evicted = e.evicted};
  auto state = EncodeState(content, TestIdentity(100), {.page_tokens = 16});
  ASSERT_TRUE(state.ok()) << state.status();
  // Head (0,0) keeps 66 of 100 (5 pages) and evicted 34 (3 pages); every head is laid out
  // retained pages first, indices continuing into the evicted ones.
  const Manifest& m = state->manifest;
  ASSERT_TRUE(ValidateManifest(m).ok());
  EXPECT_EQ(m.token_count, 100u);
  std::vector<PageRef> head00;
  for (const PageRef& r : m.pages) {
    if (r.layer == 0 && r.kv_head == 0) head00.push_back(r);
  }
  ASSERT_EQ(head00.size(), 8u);
  for (size_t i = 0; i < head00.size(); ++i) {
    EXPECT_EQ(head00[i].index, i);
    EXPECT_EQ(head00[i].tier, i < 5 ? Tier::kRetained : Tier::kEvicted);
    EXPECT_FLOAT_EQ(head00[i].importance, i < 5 ? 1.0f : 0.0f);
  }
  EXPECT_EQ(head00[0].first_position, 1);
  EXPECT_EQ(head00[5].first_position, 0);
  size_t total = 0;
  for (const PageRef& r : m.pages) total += r.bytes;
  EXPECT_EQ(total, state->bytes.size());

  model::KvCache hot(kLayers, kHeads, kDim);
  ASSERT_TRUE(LoadPages(m, state->pages(), LoadTiers::kRetained, &hot).ok());
  ExpectSameCache(hot, e.retained);

  model::KvCache everything(kLayers, kHeads, kDim);
  ASSERT_TRUE(LoadPages(m, state->pages(), LoadTiers::kAll, &everything).ok());
  ExpectSameCache(everything, e.full);
}

TEST(CachePagesTest, RecalledColdPagesMergeIntoAHotCacheByPosition) {
  Evicted e = MakeEvicted(40);
  auto state = EncodeState({.retained = &e.retained, .evicted = e.evicted}, TestIdentity(40),
                           {.page_tokens = 8});
  ASSERT_TRUE(state.ok()) << state.status();
  // The hot cache is the retained one; recall only the evicted pages of the manifest.
  Manifest cold = state->manifest;
  cold.pages.clear();
  std::vector<std::span<const uint8_t>> cold_pages;
  const auto pages = state->pages();
  for (size_t i = 0; i < pages.size(); ++i) {
    if (state->manifest.pages[i].tier != Tier::kEvicted) continue;
    cold.pages.push_back(state->manifest.pages[i]);
    cold_pages.push_back(pages[i]);
  }
  model::KvCache hot = *e.retained.Clone();
  ASSERT_TRUE(LoadPages(cold, cold_pages, LoadTiers::kAll, &hot).ok());
  ExpectSameCache(hot, e.full);
}

TEST(CachePagesTest, ImportanceIsTheMeanNormalisedScoreOfAPage) {
  model::KvCache cache(1, 1, kDim);
  std::vector<model::KvHead> evicted(1);
  for (int32_t p : {1, 2, 3, 4}) AppendTestEntry(&cache, 0, 0, p);
  AppendTestEntry(&evicted[0], 0);
  const std::vector<std::vector<float>> kept_scores{{1, 2, 3, 4}};
  const std::vector<std::vector<float>> evicted_scores{{0}};
  StateContent content{.retained = &cache,
                       .evicted = evicted,
                       .retained_scores = kept_scores,
                       .evicted_scores = evicted_scores};
  auto state = EncodeState(content, TestIdentity(5), {.page_tokens = 2});
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->manifest.pages.size(), 3u);
  // Scale over both tiers: lo 0, range 4.
  EXPECT_FLOAT_EQ(state->manifest.pages[0].importance, (0.25f + 0.5f) / 2);
  EXPECT_FLOAT_EQ(state->manifest.pages[1].importance, (0.75f + 1.0f) / 2);
  EXPECT_FLOAT_EQ(state->manifest.pages[2].importance, 0.0f);
}

TEST(CachePagesTest, InfiniteScoresClampAndEqualScoresCountAsImportant) {
  model::KvCache cache(1, 1, kDim);
  for (int32_t p : {0, 1, 2}) AppendTestEntry(&cache, 0, 0, p);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> scores{{inf, 2, 2}};
  auto state = EncodeState({.retained = &cache, .retained_scores = scores}, TestIdentity(3),
                           {.page_tokens = 1});
  ASSERT_TRUE(state.ok()) << state.status();
  for (const PageRef& r : state->manifest.pages) EXPECT_FLOAT_EQ(r.importance, 1.0f);
}

TEST(CachePagesTest, KiviKeepsTheLastRetainedEntriesExact) {
  Evicted e = MakeEvicted(120);
  auto state = EncodeState({.retained = &e.retained, .evicted = e.evicted}, TestIdentity(120),
                           {.codec = kvpage::Codec::kKivi4, .page_tokens = 64});
  ASSERT_TRUE(state.ok()) << state.status();
  model::KvCache hot(kLayers, kHeads, kDim);
  ASSERT_TRUE(LoadPages(state->manifest, state->pages(), LoadTiers::kRetained, &hot).ok());
  const model::KvHead want = e.retained.Read(0, 1);
  const model::KvHead got = hot.Read(0, 1);
  ASSERT_EQ(got.positions, want.positions);
  const int64_t n = want.size();
  for (int64_t i = 0; i < n * kDim; ++i) {
    if (i >= (n - kvpage::kKiviResidual) * kDim) {
      ASSERT_EQ(got.keys[i], want.keys[i]) << i;  // fp16 residual, exact for these values
    } else {
      // int4 per-channel groups over values in [-3.75, 3.75]: step 7.5 / 15 = 0.5.
      ASSERT_NEAR(got.keys[i], want.keys[i], 0.26f) << i;
    }
  }
}

// A cache that holds KIVI (sealed pages and fp16 rows after them), stored in its own codec and
// page size and loaded into another such cache: every sealed page goes to the state and back
// byte for byte, so the heads read back bit for bit and as many pages are sealed.
TEST(CachePagesTest, AKiviCacheIsStoredAndLoadedAsItsPoolHoldsIt) {
  for (const kernels::KvDType dtype : {kernels::KvDType::kKivi4, kernels::KvDType::kKivi2}) {
    SCOPED_TRACE(model::KvDTypeName(dtype));
    model::KvPool pool({.page_tokens = 64, .head_dim = kDim});
    model::KvCache held(kLayers, kHeads, kDim, &pool, dtype);
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t h = 0; h < kHeads; ++h) {
        for (int32_t p = 0; p < 150 + 20 * h; ++p) AppendTestEntry(&held, l, h, 3 * p);
      }
    }
    held.Seal();
    const int64_t sealed = pool.stats().used_pages[static_cast<size_t>(dtype)];
    ASSERT_EQ(sealed, int64_t{kLayers} * kHeads * 2);
    const kvpage::Codec codec = model::RowCodec(dtype);
    auto state =
        EncodeState({.retained = &held}, TestIdentity(600), {.codec = codec, .page_tokens = 64});
    ASSERT_TRUE(state.ok()) << state.status();
    for (size_t i = 0; i < state->manifest.pages.size(); ++i) {
      const PageRef& ref = state->manifest.pages[i];
      auto header = kvpage::ParsePageHeader(state->pages()[i]);
      ASSERT_TRUE(header.ok());
      EXPECT_EQ(header->codec, codec);
      // Sealed pages carry no residual; the rows after them are all fp16 residual.
      EXPECT_EQ(header->residual_rows, ref.index < 2 ? 0 : header->n_tokens) << ref.index;
      if (ref.index == 0) {
        const kernels::KvPageView page = held.Pages(ref.layer, ref.kv_head)[0];
        const kvpage::PageSections s = kvpage::SectionsOf(state->pages()[i], *header);
        EXPECT_TRUE(std::equal(s.keys.begin(), s.keys.end(), static_cast<const uint8_t*>(page.k)));
      }
    }
    model::KvCache loaded(kLayers, kHeads, kDim, &pool, dtype);
    ASSERT_TRUE(LoadPages(state->manifest, state->pages(), LoadTiers::kRetained, &loaded).ok());
    EXPECT_EQ(pool.stats().used_pages[static_cast<size_t>(dtype)], 2 * sealed);
    ExpectSameCache(loaded, held);
  }
}

// Row formats too: pages go to the state as the pool holds them (scales and codes, no decode or
// encode) and come back the same, partial last pages included.
TEST(CachePagesTest, ARowFormatCacheIsStoredAndLoadedAsItsPoolHoldsIt) {
  for (const kernels::KvDType dtype :
       {kernels::KvDType::kI8, kernels::KvDType::kE4M3, kernels::KvDType::kF16}) {
    SCOPED_TRACE(model::KvDTypeName(dtype));
    model::KvPool pool({.page_tokens = 16, .head_dim = kDim});
    model::KvCache held(kLayers, kHeads, kDim, &pool, dtype);
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t h = 0; h < kHeads; ++h) {
        for (int32_t p = 0; p < 37 + 5 * h; ++p) AppendTestEntry(&held, l, h, 2 * p);
      }
    }
    const kvpage::Codec codec = model::RowCodec(dtype);
    auto state =
        EncodeState({.retained = &held}, TestIdentity(100), {.codec = codec, .page_tokens = 16});
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<uint8_t> keys, values;
    ASSERT_TRUE(held.HeldSections(0, 1, 2, &keys, &values));  // 42 entries: the last 10
    const PageRef& ref = state->manifest.pages[5];            // (0, 0) has 3 pages, then (0, 1)'s
    ASSERT_EQ(ref.kv_head, 1u);
    ASSERT_EQ(ref.index, 2u);
    auto header = kvpage::ParsePageHeader(state->pages()[5]);
    ASSERT_TRUE(header.ok());
    const kvpage::PageSections s = kvpage::SectionsOf(state->pages()[5], *header);
    EXPECT_TRUE(std::equal(s.keys.begin(), s.keys.end(), keys.begin(), keys.end()));
    model::KvCache loaded(kLayers, kHeads, kDim, &pool, dtype);
    ASSERT_TRUE(LoadPages(state->manifest, state->pages(), LoadTiers::kRetained, &loaded).ok());
    ExpectSameCache(loaded, held);
  }
}

TEST(CachePagesTest, BadPagesLeaveTheCacheUnchanged) {
  Evicted e = MakeEvicted(50);
  auto state = EncodeState({.retained = &e.retained, .evicted = e.evicted}, TestIdentity(50),
                           {.page_tokens = 16});
  ASSERT_TRUE(state.ok()) << state.status();
  model::KvCache hot = *e.retained.Clone();

  std::vector<uint8_t> corrupt = state->bytes;
  corrupt[state->manifest.pages[0].bytes - 1] ^= 0x40;  // last byte of the first page
  EncodedState bad{state->manifest, corrupt};
  absl::Status s = LoadPages(bad.manifest, bad.pages(), LoadTiers::kAll, &hot);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;

  Manifest other_model = state->manifest;
  other_model.model = testing::TestModel(9);
  s = LoadPages(other_model, state->pages(), LoadTiers::kAll, &hot);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;

  // The retained pages again over a cache that holds them: every position would appear twice.
  s = LoadPages(state->manifest, state->pages(), LoadTiers::kRetained, &hot);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("appears twice"), std::string::npos) << s;

  model::KvCache wrong_dim(kLayers, kHeads, kDim * 2);
  s = LoadPages(state->manifest, state->pages(), LoadTiers::kAll, &wrong_dim);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  model::KvCache fewer_layers(1, kHeads, kDim);
  s = LoadPages(state->manifest, state->pages(), LoadTiers::kAll, &fewer_layers);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;

  auto pages = state->pages();
  pages.pop_back();
  s = LoadPages(state->manifest, pages, LoadTiers::kAll, &hot);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;

  ExpectSameCache(hot, e.retained);
  EXPECT_EQ(fewer_layers.TotalEntries(), 0);
}

TEST(CachePagesTest, MalformedContentIsRejected) {
  Evicted e = MakeEvicted(10);
  const StateIdentity id = TestIdentity(10);
  EXPECT_EQ(EncodeState({}, id).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeState({.retained = &e.retained}, id, {.page_tokens = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::span<const model::KvHead> too_few(e.evicted.data(), 1);
  EXPECT_EQ(EncodeState({.retained = &e.retained, .evicted = too_few}, id).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::vector<float>> short_scores(kLayers * kHeads);
  EXPECT_EQ(
      EncodeState({.retained = &e.retained, .retained_scores = short_scores}, id).status().code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<std::vector<float>> nan_scores;
  for (int32_t i = 0; i < kLayers * kHeads; ++i) {
    nan_scores.emplace_back(e.retained.size(i / kHeads, i % kHeads), 0.0f);
  }
  nan_scores[0][0] = std::nanf("");
  auto s = EncodeState({.retained = &e.retained, .retained_scores = nan_scores}, id).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("NaN"), std::string::npos) << s;
}

// The real model: a session continued from stored pages generates what the original session
// does. fp16 pages round the cache, so logits move a little and greedy tokens stay.
TEST(CachePagesModelTest, ASessionResumedFromPagesContinuesLikeTheOriginal) {
  const model::Model* m = model::testing::SharedDefaultModel();
  ASSERT_NE(m, nullptr);
  kernels::ThreadPool& pool = model::testing::SharedPool();
  const auto turn1 = m->tokenizer().Encode("The Eiffel Tower is in Paris. It was built in");
  const auto turn2 = m->tokenizer().Encode(" 1889 for the World's Fair, and it is");

  model::Sequence original(*m, pool);
  ASSERT_TRUE(original.Forward(turn1).ok());
  const auto& cache = original.cache();
  StateIdentity id = TestIdentity(static_cast<uint32_t>(turn1.size()));
  auto fingerprint = FingerprintFromHex(m->fingerprint());
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  id.model = *fingerprint;
  auto state = EncodeState({.retained = &cache}, id);
  ASSERT_TRUE(state.ok()) << state.status();

  model::Sequence resumed(*m, pool);
  ASSERT_TRUE(
      LoadPages(state->manifest, state->pages(), LoadTiers::kRetained, &resumed.cache()).ok());
  ASSERT_TRUE(resumed.Resume(static_cast<int32_t>(turn1.size())).ok());
  auto want = original.Forward(turn2);
  auto got = resumed.Forward(turn2);
  ASSERT_TRUE(want.ok() && got.ok());
  float worst = 0.0f;
  for (size_t i = 0; i < want->size(); ++i)
    worst = std::max(worst, std::abs((*want)[i] - (*got)[i]));
  EXPECT_LT(worst, 0.05f);
  EXPECT_EQ(std::max_element(want->begin(), want->end()) - want->begin(),
            std::max_element(got->begin(), got->end()) - got->begin());

  model::Sequence early(*m, pool);
  ASSERT_TRUE(
      LoadPages(state->manifest, state->pages(), LoadTiers::kRetained, &early.cache()).ok());
  EXPECT_EQ(early.Resume(static_cast<int32_t>(turn1.size()) - 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(early.Resume(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(early.next_position(), 0);
}

}  // namespace
}  // namespace glimpse::kvstate
