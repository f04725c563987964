#include "core/model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/kvpage/codec.h"
#include "gtest/gtest.h"
#include "kernels/quant.h"

namespace glimpse::model {
namespace {

using kernels::KvDType;

// Fills head (0, h) with n entries whose key/value channels all equal the position.
void FillHead(KvCache& cache, int32_t h, int32_t n) {
  const int32_t d = cache.head_dim();
  std::vector<float> k(n * d), v(n * d);
  std::vector<int32_t> pos(n);
  for (int32_t i = 0; i < n; ++i) {
    pos[i] = 10 + i;
    for (int32_t c = 0; c < d; ++c) {
      k[i * d + c] = static_cast<float>(pos[i]);
      v[i * d + c] = -static_cast<float>(pos[i]);
    }
  }
  ASSERT_TRUE(cache.Append(0, h, k.data(), v.data(), pos.data(), n).ok());
}

std::vector<int32_t> Positions(const KvCache& cache, int32_t l, int32_t h) {
  const std::span<const int32_t> p = cache.positions(l, h);
  return {p.begin(), p.end()};
}

TEST(KvCacheTest, HeadsAreIndependentAndRaggedAfterRetain) {
  KvCache cache(/*n_layers=*/2, /*n_kv_heads=*/3, /*head_dim=*/4);
  FillHead(cache, 0, 5);
  FillHead(cache, 1, 5);
  ASSERT_TRUE(cache.Retain(0, 0, {0, 2, 4}).ok());
  ASSERT_TRUE(cache.Retain(0, 1, {3}).ok());

  const KvHead h0 = cache.Read(0, 0);
  EXPECT_EQ(h0.positions, (std::vector<int32_t>{10, 12, 14}));
  EXPECT_EQ(h0.keys[1 * 4 + 3], 12.0f);
  EXPECT_EQ(h0.values[2 * 4], -14.0f);
  EXPECT_EQ(Positions(cache, 0, 1), (std::vector<int32_t>{13}));
  EXPECT_EQ(cache.size(1, 0), 0);
  EXPECT_EQ(cache.TotalEntries(), 4);
  EXPECT_EQ(cache.dtype(), KvDType::kF32);
  // One page per non-empty head: 64 rows of 4 fp32 keys and values.
  EXPECT_EQ(cache.TotalBytes(), 2 * cache.pool().PageBytes(KvDType::kF32));
  EXPECT_EQ(cache.pool().PageBytes(KvDType::kF32), 2 * 64 * 4 * 4);
}

TEST(KvCacheTest, RetainRejectsBadIndicesAndLeavesHeadUnchanged) {
  KvCache cache(1, 1, 2);
  FillHead(cache, 0, 3);
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, 3}, {2, 1}, {1, 1}, {-1}}) {
    const absl::Status status = cache.Retain(0, 0, bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("layer 0, kv_head 0"), std::string::npos) << status;
  }
  EXPECT_EQ(Positions(cache, 0, 0), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(cache.Retain(0, 5, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCacheTest, RetainEverythingAndNothing) {
  KvCache cache(1, 1, 2);
  FillHead(cache, 0, 3);
  ASSERT_TRUE(cache.Retain(0, 0, {0, 1, 2}).ok());
  EXPECT_EQ(cache.size(0, 0), 3);
  ASSERT_TRUE(cache.Retain(0, 0, {}).ok());
  EXPECT_EQ(cache.size(0, 0), 0);
  EXPECT_TRUE(cache.Read(0, 0).keys.empty());
  EXPECT_EQ(cache.TotalBytes(), 0);  // the page went back to the pool
  EXPECT_EQ(cache.pool().stats().used_pages[0], 0);
}

// Every format stores what core/kvpage's codec of the same name would: a head read back equals
// the codec's round trip of the appended rows, across page boundaries and after compaction.
TEST(KvCacheTest, EveryFormatHoldsTheCodecsRoundTripAcrossPagesAndCompaction) {
  constexpr int32_t kDim = 64;
  const std::pair<KvDType, kvpage::Codec> formats[] = {{KvDType::kF32, kvpage::Codec::kFp32},
                                                       {KvDType::kF16, kvpage::Codec::kFp16},
                                                       {KvDType::kBF16, kvpage::Codec::kBf16},
                                                       {KvDType::kI8, kvpage::Codec::kInt8},
                                                       {KvDType::kE4M3, kvpage::Codec::kFp8E4M3}};
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (const auto& [dtype, codec_id] : formats) {
    SCOPED_TRACE(KvDTypeName(dtype));
    KvPool pool({.page_tokens = 16, .head_dim = kDim});
    KvCache cache(1, 1, kDim, &pool, dtype);
    const int64_t n = 41;  // two full pages and a partial one, appended in three calls
    std::vector<float> k(n * kDim), v(n * kDim);
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(3 * i);
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 30}, {30, 41}}) {
      ASSERT_TRUE(cache
                      .Append(0, 0, k.data() + begin * kDim, v.data() + begin * kDim,
                              pos.data() + begin, end - begin)
                      .ok());
    }
    const kvpage::CodecInfo& codec = *kvpage::FindCodec(static_cast<uint8_t>(codec_id));
    auto round_trip = [&](const std::vector<float>& x, kvpage::Role role) {
      std::vector<uint8_t> section(codec.section_bytes(role, n, kDim, 0));
      EXPECT_TRUE(codec.encode(role, x.data(), n, kDim, 0, section.data()).ok());
      std::vector<float> y(x.size());
      codec.decode(role, section.data(), n, kDim, 0, y.data());
      return y;
    };
    const std::vector<float> want_k = round_trip(k, kvpage::Role::kKeys);
    const std::vector<float> want_v = round_trip(v, kvpage::Role::kValues);
    KvHead got = cache.Read(0, 0);
    EXPECT_EQ(got.positions, pos);
    EXPECT_EQ(got.keys, want_k);
    EXPECT_EQ(got.values, want_v);
    EXPECT_EQ(cache.Pages(0, 0).size(), 3u);
    EXPECT_EQ(pool.stats().used_pages[static_cast<size_t>(dtype)], 3);

    // Keep every third entry: rows move as stored, the emptied pages go back.
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < n; i += 3) keep.push_back(i);
    ASSERT_TRUE(cache.Retain(0, 0, keep).ok());
    got = cache.Read(0, 0);
    ASSERT_EQ(got.size(), static_cast<int64_t>(keep.size()));
    for (size_t i = 0; i < keep.size(); ++i) {
      EXPECT_EQ(got.positions[i], pos[keep[i]]);
      for (int32_t c = 0; c < kDim; ++c) {
        ASSERT_EQ(got.keys[i * kDim + c], want_k[keep[i] * kDim + c]);
        ASSERT_EQ(got.values[i * kDim + c], want_v[keep[i] * kDim + c]);
      }
    }
    EXPECT_EQ(pool.stats().used_pages[static_cast<size_t>(dtype)], 1);  // 14 entries, one page
  }
}

// KIVI's round trip of rows [begin, begin + 64) of x, a whole sealed page (no residual).
// n rows of keys and values drawn from N(0, 2) and their positions 0, step, 2·step, ….
struct Rows {
  std::vector<float> keys, values;  // [n, dim]
  std::vector<int32_t> positions;
};
Rows RandomRows(int64_t n, int32_t dim, uint32_t seed, int32_t position_step) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  Rows r{std::vector<float>(n * dim), std::vector<float>(n * dim), std::vector<int32_t>(n)};
  for (float& x : r.keys) x = dist(rng);
  for (float& x : r.values) x = dist(rng);
  for (int64_t i = 0; i < n; ++i) r.positions[i] = static_cast<int32_t>(position_step * i);
  return r;
}

std::vector<float> KiviPageRoundTrip(kvpage::Codec codec_id, kvpage::Role role,
                                     const std::vector<float>& x, int64_t begin, int64_t dim) {
  const kvpage::CodecInfo& codec = *kvpage::FindCodec(static_cast<uint8_t>(codec_id));
  std::vector<uint8_t> section(codec.section_bytes(role, 64, dim, 0));
  EXPECT_TRUE(codec.encode(role, x.data() + begin * dim, 64, dim, 0, section.data()).ok());
  std::vector<float> y(64 * dim);
  codec.decode(role, section.data(), 64, dim, 0, y.data());
  return y;
}

// What a KIVI head holds for appended rows x: fp16(x), then every full page sealed into KIVI.
std::vector<float> KiviHeld(kvpage::Codec codec, kvpage::Role role, const std::vector<float>& x,
                            int64_t n, int64_t dim) {
  std::vector<float> held(x.size());
  for (size_t i = 0; i < x.size(); ++i) held[i] = kernels::Fp16ToFp32(kernels::Fp32ToFp16(x[i]));
  for (int64_t page = 0; (page + 1) * 64 <= n; ++page) {
    const std::vector<float> y = KiviPageRoundTrip(codec, role, held, page * 64, dim);
    std::copy(y.begin(), y.end(), held.begin() + page * 64 * dim);
  }
  return held;
}

// KIVI formats fill pages in fp16 and Seal() turns each full page into one KIVI page: the head
// reads back as KIVI's round trip of the fp16 rows, whatever the chunking of the appends; a
// Retain that moves sealed rows re-encodes them, one that does not leaves sealed pages as they
// were; pages and bytes are counted by format.
TEST(KvCacheTest, KiviHeadsFillInFp16AndSealFullPages) {
  constexpr int32_t kDim = 64;
  constexpr int64_t n = 150;  // two full pages and 22 rows
  const auto [k, v, pos] = RandomRows(n, kDim, /*seed=*/9, /*position_step=*/2);
  const std::pair<KvDType, kvpage::Codec> formats[] = {{KvDType::kKivi4, kvpage::Codec::kKivi4},
                                                       {KvDType::kKivi2, kvpage::Codec::kKivi2}};
  for (const auto& [dtype, codec] : formats) {
    SCOPED_TRACE(KvDTypeName(dtype));
    KvPool pool({.page_tokens = 64, .head_dim = kDim});
    const auto used = [&](KvDType d) { return pool.stats().used_pages[static_cast<size_t>(d)]; };
    KvCache cache(1, 1, kDim, &pool, dtype);
    EXPECT_EQ(cache.filling_dtype(), KvDType::kF16);
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 100}, {100, 150}}) {
      ASSERT_TRUE(cache
                      .Append(0, 0, k.data() + begin * kDim, v.data() + begin * kDim,
                              pos.data() + begin, end - begin)
                      .ok());
    }
    EXPECT_EQ(used(KvDType::kF16), 3);
    cache.Seal();
    EXPECT_EQ(used(dtype), 2);
    EXPECT_EQ(used(KvDType::kF16), 1);
    EXPECT_EQ(cache.TotalBytes(), 2 * pool.PageBytes(dtype) + pool.PageBytes(KvDType::kF16));
    const std::vector<float> want_k = KiviHeld(codec, kvpage::Role::kKeys, k, n, kDim);
    const std::vector<float> want_v = KiviHeld(codec, kvpage::Role::kValues, v, n, kDim);
    KvHead got = cache.Read(0, 0);
    EXPECT_EQ(got.positions, pos);
    EXPECT_EQ(got.keys, want_k);
    EXPECT_EQ(got.values, want_v);
    const std::vector<kernels::KvPageView> pages = cache.Pages(0, 0);
    ASSERT_EQ(pages.size(), 3u);
    EXPECT_EQ(pages[0].dtype, dtype);
    EXPECT_EQ(pages[2].dtype, KvDType::kF16);
    EXPECT_EQ(pages[2].rows, 22);

    // One append of everything, sealed: the same bytes.
    KvCache once(1, 1, kDim, &pool, dtype);
    ASSERT_TRUE(once.Append(0, 0, k.data(), v.data(), pos.data(), n).ok());
    once.Seal();
    EXPECT_EQ(once.Read(0, 0).keys, got.keys);
    once.Clear();

    // Keeping the first page whole and two later rows: the sealed page stays as it was.
    std::vector<int64_t> keep(64);
    for (int64_t i = 0; i < 64; ++i) keep[i] = i;
    keep.push_back(100);
    keep.push_back(120);
    absl::StatusOr<KvCache> copy = cache.Clone();
    ASSERT_TRUE(copy.ok());
    EXPECT_EQ(copy->Read(0, 0).keys, got.keys);
    ASSERT_TRUE(copy->Retain(0, 0, keep).ok());
    const KvHead kept = copy->Read(0, 0);
    ASSERT_EQ(kept.size(), 66);
    EXPECT_TRUE(std::equal(kept.keys.begin(), kept.keys.begin() + 64 * kDim, got.keys.begin()));
    // Rows 100 and 120 moved out of a sealed page: fp16 rows of what it held.
    EXPECT_EQ(kept.keys[64 * kDim + 3],
              kernels::Fp16ToFp32(kernels::Fp32ToFp16(got.keys[100 * kDim + 3])));
    copy->Clear();

    // Every other entry: rows of both sealed pages move and are sealed again as pages fill.
    keep.clear();
    for (int64_t i = 0; i < n; i += 2) keep.push_back(i);
    ASSERT_TRUE(cache.Retain(0, 0, keep).ok());
    std::vector<float> moved_k;
    for (int64_t i : keep) {
      moved_k.insert(moved_k.end(), got.keys.begin() + i * kDim, got.keys.begin() + (i + 1) * kDim);
    }
    got = cache.Read(0, 0);
    EXPECT_EQ(got.keys, KiviHeld(codec, kvpage::Role::kKeys, moved_k, 75, kDim));
    EXPECT_EQ(used(dtype), 1);
    EXPECT_EQ(used(KvDType::kF16), 1);
    cache.Truncate(0, 0, 64);  // a page boundary: the sealed page stays
    EXPECT_EQ(used(KvDType::kF16), 0);
    cache.Clear();
    EXPECT_EQ(pool.stats().used_bytes, 0);
  }
}

// Sections in: what HeldSections gives out goes into another cache byte for byte; sections it
// cannot take as they are, of the wrong size, or positions that do not follow are refused and
// the head keeps what it had.
TEST(KvCacheTest, SectionsGoOutAndInAsTheyAreAndBadOnesAreRefused) {
  constexpr int32_t kDim = 8;
  KvPool pool({.page_tokens = 4, .head_dim = kDim});
  KvCache from(1, 1, kDim, &pool, KvDType::kI8), to(1, 1, kDim, &pool, KvDType::kI8);
  FillHead(from, 0, 6);
  std::vector<uint8_t> k, v;
  ASSERT_TRUE(from.HeldSections(0, 0, 1, &k, &v));  // the last page: 2 entries
  EXPECT_EQ(k.size(), 2 * (4 + kDim));              // scales, then codes
  const std::vector<int32_t> pos = {40, 41};
  EXPECT_FALSE(to.TakesSections(0, 0, kvpage::Codec::kFp16, 0, 2));
  EXPECT_EQ(to.AppendSections(0, 0, kvpage::Codec::kFp16, k, v, pos.data(), 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(to.AppendSections(0, 0, kvpage::Codec::kInt8, k, v, pos.data(), 3).code(),
            absl::StatusCode::kInvalidArgument);  // sizes of 2 entries, not 3
  ASSERT_TRUE(to.AppendSections(0, 0, kvpage::Codec::kInt8, k, v, pos.data(), 2).ok());
  EXPECT_EQ(to.AppendSections(0, 0, kvpage::Codec::kInt8, k, v, pos.data(), 2).code(),
            absl::StatusCode::kInvalidArgument);  // positions 40, 41 again
  EXPECT_EQ(to.size(0, 0), 2);
  const KvHead a = from.Read(0, 0), b = to.Read(0, 0);
  EXPECT_TRUE(std::equal(b.keys.begin(), b.keys.end(), a.keys.begin() + 4 * kDim));
  EXPECT_EQ(b.positions, pos);
  // A KIVI head takes only whole sealed pages, and only after sealed pages.
  KvPool kivi_pool({.page_tokens = 64, .head_dim = 64});
  KvCache kivi(1, 1, 64, &kivi_pool, KvDType::kKivi4);
  EXPECT_TRUE(kivi.TakesSections(0, 0, kvpage::Codec::kKivi4, 0, 64));
  EXPECT_FALSE(kivi.TakesSections(0, 0, kvpage::Codec::kKivi4, 0, 32));
  EXPECT_FALSE(kivi.TakesSections(0, 0, kvpage::Codec::kKivi4, 32, 64));
  FillHead(kivi, 0, 1);
  EXPECT_FALSE(kivi.TakesSections(0, 0, kvpage::Codec::kKivi4, 0, 64));
  EXPECT_FALSE(kivi.HeldSections(0, 0, 0, &k, &v));  // an fp16 page is not held as KIVI
}

// Re-encoding an int8 cache into kivi4: the bytes BytesIn predicted, positions unchanged, values
// within KIVI's bound (scale/2 over the int8 rows' range), the int8 pages back in the pool.
TEST(KvCacheTest, ReencodeMovesEveryHeadIntoTheNewFormat) {
  constexpr int32_t kDim = 64;
  KvPool pool({.page_tokens = 64, .head_dim = kDim});
  KvCache cache(2, 1, kDim, &pool, KvDType::kI8);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int32_t l = 0; l < 2; ++l) {
    const int64_t n = l == 0 ? 150 : 20;
    std::vector<float> k(n * kDim), v(n * kDim);
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
    ASSERT_TRUE(cache.Append(l, 0, k.data(), v.data(), pos.data(), n).ok());
  }
  const KvHead before = cache.Read(0, 0);
  const int64_t predicted = cache.BytesIn(KvDType::kKivi4);
  EXPECT_EQ(predicted, 2 * pool.PageBytes(KvDType::kKivi4) + 2 * pool.PageBytes(KvDType::kF16));
  ASSERT_TRUE(cache.Reencode(KvDType::kKivi4).ok());
  EXPECT_EQ(cache.dtype(), KvDType::kKivi4);
  EXPECT_EQ(cache.TotalBytes(), predicted);
  EXPECT_EQ(pool.stats().used_pages[static_cast<size_t>(KvDType::kI8)], 0);
  const KvHead after = cache.Read(0, 0);
  EXPECT_EQ(after.positions, before.positions);
  for (size_t i = 0; i < before.keys.size(); ++i) {
    ASSERT_NEAR(after.keys[i], before.keys[i], 2.0f / 15 / 2 + 1e-3f) << i;  // range 2, 15 steps
  }
  EXPECT_EQ(cache.size(1, 0), 20);
  EXPECT_EQ(KvCache(1, 1, kDim).Reencode(KvDType::kI8).code(),
            absl::StatusCode::kFailedPrecondition);  // a private fp32 cache stays fp32
}

// A pool full of fp16 pages still seals: the full page's bytes pay for its (smaller) KIVI page.
TEST(KvCacheTest, AFullPoolStillSealsAFullPage) {
  constexpr int32_t kDim = 64;
  constexpr int64_t n = 64;  // one full page
  KvPool probe({.page_tokens = 64, .head_dim = kDim});
  KvPool pool(
      {.budget_bytes = probe.PageBytes(KvDType::kF16), .page_tokens = 64, .head_dim = kDim});
  const auto [k, v, pos] = RandomRows(n, kDim, /*seed=*/3, /*position_step=*/1);
  KvCache cache(1, 1, kDim, &pool, KvDType::kKivi4);
  ASSERT_TRUE(cache.Append(0, 0, k.data(), v.data(), pos.data(), n).ok());
  ASSERT_EQ(pool.stats().used_bytes, pool.budget_bytes());
  cache.Seal();
  const KvPool::Stats s = pool.stats();
  EXPECT_EQ(s.used_pages[static_cast<size_t>(KvDType::kKivi4)], 1);
  EXPECT_EQ(s.used_pages[static_cast<size_t>(KvDType::kF16)], 0);
  EXPECT_LE(s.held_bytes, s.budget_bytes);
  const KvHead got = cache.Read(0, 0);
  EXPECT_EQ(got.keys, KiviHeld(kvpage::Codec::kKivi4, kvpage::Role::kKeys, k, n, kDim));
  EXPECT_EQ(got.values, KiviHeld(kvpage::Codec::kKivi4, kvpage::Role::kValues, v, n, kDim));
}

TEST(KvCacheTest, AFullPoolRefusesAnAppendAndTheHeadKeepsWhatItHad) {
  constexpr int32_t kDim = 8;
  KvPool pool({.page_tokens = 4, .head_dim = kDim});
  const int64_t page = pool.PageBytes(KvDType::kF16);
  KvPool small({.budget_bytes = 2 * page, .page_tokens = 4, .head_dim = kDim});
  KvCache cache(1, 2, kDim, &small, KvDType::kF16);
  std::vector<float> k(12 * kDim, 1.0f), v(12 * kDim, 2.0f);
  std::vector<int32_t> pos(12);
  for (int32_t i = 0; i < 12; ++i) pos[i] = i;
  ASSERT_TRUE(cache.Append(0, 0, k.data(), v.data(), pos.data(), 6).ok());  // 2 pages: the budget
  const absl::Status full = cache.Append(0, 1, k.data(), v.data(), pos.data(), 1);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("fp16"), std::string::npos) << full;
  EXPECT_EQ(cache.size(0, 1), 0);
  // An append that needs one more page than there is gets nothing, all or nothing.
  EXPECT_EQ(cache.Append(0, 0, k.data(), v.data(), pos.data() + 6, 3).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.size(0, 0), 6);
  EXPECT_EQ(small.stats().used_pages[static_cast<size_t>(KvDType::kF16)], 2);
  // Room comes back when a head lets go: the freed page serves another head, and another format
  // once the budget is short (free pages of other formats are released).
  cache.Truncate(0, 0, 4);
  EXPECT_TRUE(cache.Append(0, 1, k.data(), v.data(), pos.data(), 1).ok());
  cache.Clear();
  KvCache other(1, 1, kDim, &small, KvDType::kI8);
  EXPECT_TRUE(other.Append(0, 0, k.data(), v.data(), pos.data(), 8).ok());
  const KvPool::Stats s = small.stats();
  EXPECT_LE(s.held_bytes, s.budget_bytes);
  EXPECT_EQ(s.used_pages[static_cast<size_t>(KvDType::kI8)], 2);
}

TEST(KvCacheTest, AValueTheFormatCannotHoldIsAClearErrorAndNothingIsAppended) {
  KvPool pool({.head_dim = 4});
  KvCache cache(1, 1, 4, &pool, KvDType::kF16);
  const float k[4] = {1, 2, 1e6f, 4}, v[4] = {0, 0, 0, 0};
  const int32_t pos[1] = {0};
  const absl::Status st = cache.Append(0, 0, k, v, pos, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.size(0, 0), 0);
  EXPECT_EQ(pool.stats().used_pages[static_cast<size_t>(KvDType::kF16)], 0);
}

TEST(KvCacheTest, MovingACacheMovesItsPages) {
  KvCache a(1, 1, 2);
  FillHead(a, 0, 3);
  KvCache b = std::move(a);
  EXPECT_EQ(Positions(b, 0, 0), (std::vector<int32_t>{10, 11, 12}));
  KvCache c(1, 1, 2);
  c = std::move(b);
  EXPECT_EQ(c.Read(0, 0).keys[2], 11.0f);
}

}  // namespace
}  // namespace glimpse::model
