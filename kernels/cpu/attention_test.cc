#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/test_pages.h"
#include "kernels/cpu/test_util.h"
#include "kernels/quant.h"

namespace glimpse::kernels {
namespace {

using testing::AllClose;
using testing::kDTypes;
using testing::RandomFloats;
using testing::RandomPage;

// Dense causal attention over T tokens at positions 0..T−1 in double, where key t is visible to a
// query at position p iff keep[t] and t <= p. out: [n_q, head_dim].
std::vector<float> DenseMasked(const std::vector<float>& q, const std::vector<int32_t>& q_pos,
                               const std::vector<float>& k, const std::vector<float>& v,
                               const std::vector<bool>& keep, float scale, int64_t head_dim) {
  const int64_t n_q = static_cast<int64_t>(q_pos.size()), T = static_cast<int64_t>(keep.size());
  std::vector<float> out(n_q * head_dim, 0.0f);
  for (int64_t i = 0; i < n_q; ++i) {
    std::vector<double> s(T, -INFINITY);
    double max = -INFINITY;
    for (int64_t t = 0; t < T; ++t) {
      if (!keep[t] || t > q_pos[i]) continue;
      s[t] = 0;
      for (int64_t d = 0; d < head_dim; ++d)
        s[t] += double{q[i * head_dim + d]} * k[t * head_dim + d];
      s[t] *= scale;
      max = std::max(max, s[t]);
    }
    if (max == -INFINITY) continue;
    double sum = 0;
    std::vector<double> o(head_dim, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      if (s[t] == -INFINITY) continue;
      const double p = std::exp(s[t] - max);
      sum += p;
      for (int64_t d = 0; d < head_dim; ++d) o[d] += p * v[t * head_dim + d];
    }
    for (int64_t d = 0; d < head_dim; ++d) out[i * head_dim + d] = static_cast<float>(o[d] / sum);
  }
  return out;
}

TEST(AttentionTest, HandComputed) {
  // head_dim 2, keys at positions 0 and 1; the query at position 0 sees only key 0.
  const float q[4] = {1, 0, 1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4};
  const int32_t q_pos[2] = {0, 1}, kv_pos[2] = {0, 1};
  float out[4], scratch[2];
  AttendRagged(out, q, q_pos, k, v, kv_pos, 1.0f, scratch, 2, 2, 2);
  // Query 1: scores (1, 0) → weights (e/(e+1), 1/(e+1)).
  const float w0 = std::exp(1.0f) / (std::exp(1.0f) + 1), w1 = 1 - w0;
  const float want[4] = {1, 2, w0 * 1 + w1 * 3, w0 * 2 + w1 * 4};
  EXPECT_TRUE(AllClose(out, want, 4, 1e-6f, 1e-6f));
}

TEST(AttentionTest, NoVisibleEntryGivesZeros) {
  const int64_t hd = 64;
  const std::vector<float> q = RandomFloats(3 * hd, 1), k = RandomFloats(5 * hd, 2),
                           v = RandomFloats(5 * hd, 3);
  const int32_t q_pos[3] = {2, 10, 1}, kv_pos[5] = {3, 4, 5, 6, 7};
  std::vector<float> out(3 * hd, 7.0f), scratch(5);
  AttendRagged(out.data(), q.data(), q_pos, k.data(), v.data(), kv_pos, 0.125f, scratch.data(), 3,
               5, hd);
  for (int64_t d = 0; d < hd; ++d) {
    EXPECT_EQ(out[d], 0.0f);
    EXPECT_EQ(out[2 * hd + d], 0.0f);
  }
  EXPECT_NE(out[hd], 0.0f);
  AttendRagged(out.data(), q.data(), q_pos, k.data(), v.data(), kv_pos, 0.125f, scratch.data(), 3,
               0, hd);  // empty cache
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// A ragged cache (arbitrary entries dropped, the rest shuffled) equals dense attention with those
// entries masked, for the fast path and the reference, over odd sizes.
TEST(AttentionTest, RaggedShuffledEqualsMaskedDense) {
  std::mt19937 rng(42);
  for (int64_t head_dim : {8, 64, 128, 6}) {
    for (int64_t T : {1, 3, 7, 19, 37, 133}) {
      for (int64_t n_q : {1, 3, 7, 19}) {
        SCOPED_TRACE(::testing::Message()
                     << "head_dim=" << head_dim << " T=" << T << " n_q=" << n_q);
        const std::vector<float> k = RandomFloats(T * head_dim, rng(), -2, 2);
        const std::vector<float> v = RandomFloats(T * head_dim, rng());
        const std::vector<float> q = RandomFloats(n_q * head_dim, rng(), -2, 2);
        std::vector<int32_t> q_pos(n_q);
        for (int32_t& p : q_pos) p = static_cast<int32_t>(rng() % (T + 2)) - 1;  // −1 … T
        std::vector<bool> keep(T);
        std::vector<int64_t> kept;
        for (int64_t t = 0; t < T; ++t) {
          keep[t] = rng() % 4 != 0;
          if (keep[t]) kept.push_back(t);
        }
        std::shuffle(kept.begin(), kept.end(), rng);
        const int64_t n_kv = static_cast<int64_t>(kept.size());
        std::vector<float> rk(n_kv * head_dim), rv(n_kv * head_dim);
        std::vector<int32_t> kv_pos(n_kv);
        for (int64_t j = 0; j < n_kv; ++j) {
          std::copy_n(k.begin() + kept[j] * head_dim, head_dim, rk.begin() + j * head_dim);
          std::copy_n(v.begin() + kept[j] * head_dim, head_dim, rv.begin() + j * head_dim);
          kv_pos[j] = static_cast<int32_t>(kept[j]);
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        const std::vector<float> want = DenseMasked(q, q_pos, k, v, keep, scale, head_dim);
        std::vector<float> got(n_q * head_dim, NAN), ref(n_q * head_dim, NAN), scratch(n_kv + 1);
        AttendRagged(got.data(), q.data(), q_pos.data(), rk.data(), rv.data(), kv_pos.data(), scale,
                     scratch.data(), n_q, n_kv, head_dim);
        internal::AttendRaggedRef(ref.data(), q.data(), q_pos.data(), rk.data(), rv.data(),
                                  kv_pos.data(), scale, scratch.data(), n_q, n_kv, head_dim);
        EXPECT_TRUE(AllClose(got, want, 1e-5f, 1e-5f)) << "fast";
        EXPECT_TRUE(AllClose(ref, want, 1e-5f, 1e-5f)) << "reference";
      }
    }
  }
}

// Causal prefill layout: the GQA group's 3 heads × T tokens at positions 0..T−1 over sorted keys
// (tiles wholly in the future are skipped); fast path equals the reference.
TEST(AttentionTest, SortedPrefillMatchesReference) {
  const int64_t head_dim = 64, T = 133, n_q = 3 * T;
  const std::vector<float> k = RandomFloats(T * head_dim, 5, -2, 2),
                           v = RandomFloats(T * head_dim, 6);
  const std::vector<float> q = RandomFloats(n_q * head_dim, 7, -2, 2);
  std::vector<int32_t> q_pos(n_q), kv_pos(T);
  for (int64_t i = 0; i < n_q; ++i) q_pos[i] = static_cast<int32_t>(i % T);
  std::iota(kv_pos.begin(), kv_pos.end(), 0);
  std::vector<float> got(n_q * head_dim), ref(n_q * head_dim), scratch(T);
  AttendRagged(got.data(), q.data(), q_pos.data(), k.data(), v.data(), kv_pos.data(), 0.125f,
               scratch.data(), n_q, T, head_dim);
  internal::AttendRaggedRef(ref.data(), q.data(), q_pos.data(), k.data(), v.data(), kv_pos.data(),
                            0.125f, scratch.data(), n_q, T, head_dim);
  EXPECT_TRUE(AllClose(got, ref, 1e-6f, 1e-5f));
  // An early block of query rows alone (the caller's work items): later key tiles are skipped
  // without being transposed.
  const int64_t rows = 3 * 20;
  std::vector<int32_t> early_pos(rows);
  for (int64_t i = 0; i < rows; ++i) early_pos[i] = static_cast<int32_t>(i / 3);
  AttendRagged(got.data(), q.data(), early_pos.data(), k.data(), v.data(), kv_pos.data(), 0.125f,
               scratch.data(), rows, T, head_dim);
  internal::AttendRaggedRef(ref.data(), q.data(), early_pos.data(), k.data(), v.data(),
                            kv_pos.data(), 0.125f, scratch.data(), rows, T, head_dim);
  EXPECT_TRUE(AllClose(got.data(), ref.data(), rows * head_dim, 1e-6f, 1e-5f));
}

TEST(AttentionTest, E4m3CodesDecodeToTheirValues) {
  EXPECT_EQ(internal::E4m3ToFp32(0x38), 1.0f);                  // exponent 7, mantissa 0
  EXPECT_EQ(internal::E4m3ToFp32(0x7E), 448.0f);                // the largest finite value
  EXPECT_EQ(internal::E4m3ToFp32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(internal::E4m3ToFp32(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(internal::E4m3ToFp32(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(internal::E4m3ToFp32(0x7F)));
  EXPECT_TRUE(std::isnan(internal::E4m3ToFp32(0xFF)));
  EXPECT_EQ(internal::E4m3ToFp32(0x80), 0.0f);
}

TEST(AttentionTest, VectorDequantizationEqualsTheReferenceForEveryFormat) {
  std::mt19937 rng(3);
  for (KvDType d : kDTypes) {
    for (int64_t hd : {8, 64, 128, 5, 40}) {
      for (int64_t rows : {7, 64, 45}) {
        const RandomPage page(d, rows, hd, 0, rng);
        std::vector<float> got_k(hd), got_v(hd), ref_k(hd), ref_v(hd);
        for (int64_t r = 0; r < page.rows; ++r) {
          DequantizeKvPageRow(got_k.data(), got_v.data(), page.view(), r, hd);
          internal::DequantizeKvPageRowRef(ref_k.data(), ref_v.data(), page.view(), r, hd);
          ASSERT_TRUE(AllClose(got_k, ref_k, 0.0f, 0.0f)) << static_cast<int>(d) << " hd " << hd;
          ASSERT_TRUE(AllClose(got_v, ref_v, 0.0f, 0.0f)) << static_cast<int>(d) << " hd " << hd;
        }
      }
    }
  }
  // Every E4M3 code, NaN included, through the vector path.
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  const std::vector<float> scale(32, 0.5f);
  std::vector<int32_t> pos(32);
  const KvPageView page{.dtype = KvDType::kE4M3,
                        .k = codes.data(),
                        .v = codes.data(),
                        .k_scale = scale.data(),
                        .v_scale = scale.data(),
                        .pos = pos.data(),
                        .rows = 32};
  std::vector<float> got(8), unused(8);
  for (int64_t r = 0; r < 32; ++r) {
    DequantizeKvPageRow(got.data(), unused.data(), page, r, 8);
    for (int64_t c = 0; c < 8; ++c) {
      const float want = internal::E4m3ToFp32(codes[r * 8 + c]) * 0.5f;
      EXPECT_TRUE(got[c] == want || (std::isnan(got[c]) && std::isnan(want))) << r * 8 + c;
    }
  }
}

// A KIVI code of every value at every channel decodes to code·scale + zero of its group.
TEST(AttentionTest, KiviCodesDecodeToTheirGroupsScaleAndZero) {
  for (const KvDType d : {KvDType::kKivi4, KvDType::kKivi2}) {
    const int bits = internal::KiviBits(d);
    const int64_t hd = 64, rows = 64, row_bytes = hd * bits / 8;
    std::vector<uint8_t> k(4 * 2 * hd + rows * row_bytes), v(4 * rows * 2 + rows * row_bytes);
    auto put_half = [](std::vector<uint8_t>& s, int64_t i, float x) {
      const uint16_t h = Fp32ToFp16(x);
      std::memcpy(&s[2 * i], &h, 2);
    };
    for (int64_t i = 0; i < 2 * hd; ++i) {
      put_half(k, i, 0.25f * static_cast<float>(1 + i % 3));   // key scale [group, channel]
      put_half(k, 2 * hd + i, static_cast<float>(i % 5) - 2);  // key zero
    }
    for (int64_t i = 0; i < 2 * rows; ++i) {
      put_half(v, i, 0.5f * static_cast<float>(1 + i % 2));         // value scale [row, group]
      put_half(v, 2 * rows + i, static_cast<float>(i % 7) - 3.0f);  // value zero
    }
    auto code_of = [&](int64_t r, int64_t c) { return (r * 7 + c * 3) % (1 << bits); };
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < hd; ++c) {
        const uint8_t bitsr = static_cast<uint8_t>(code_of(r, c) << ((c * bits) % 8));
        k[4 * 2 * hd + r * row_bytes + c * bits / 8] |= bitsr;
        v[4 * 2 * rows + r * row_bytes + c * bits / 8] |= bitsr;
      }
    }
    std::vector<int32_t> pos(rows);
    const KvPageView page{
        .dtype = d, .k = k.data(), .v = v.data(), .pos = pos.data(), .rows = rows};
    std::vector<float> kx(hd), vx(hd);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeKvPageRow(kx.data(), vx.data(), page, r, hd);
      for (int64_t c = 0; c < hd; ++c) {
        const int64_t kp = (r / 32) * hd + c, vp = r * 2 + c / 32;
        const float k_want = code_of(r, c) * 0.25f * (1 + kp % 3) + (kp % 5 - 2);
        const float v_want = code_of(r, c) * 0.5f * (1 + vp % 2) + (vp % 7 - 3);
        ASSERT_EQ(kx[c], k_want) << "bits " << bits << " row " << r << " channel " << c;
        ASSERT_EQ(vx[c], v_want) << "bits " << bits << " row " << r << " channel " << c;
      }
    }
  }
}

// Pages of every format and ragged sizes (partial tiles, partial last pages), positions that hide
// some entries from some rows: the fast path equals the reference (rows dequantised, then
// AttendRaggedRef) within fp32 reordering. Tolerance 1e-5 relative and absolute for every format:
// both paths see the same dequantised values, so only the order of fp32 sums differs.
TEST(AttentionTest, PagedEqualsTheDequantisedReference) {
  std::mt19937 rng(11);
  for (KvDType d : kDTypes) {
    for (int64_t hd : {8, 64, 6, 40}) {
      for (int64_t n_q : {1, 3, 7, 12}) {
        SCOPED_TRACE(::testing::Message()
                     << "dtype " << static_cast<int>(d) << " hd " << hd << " n_q " << n_q);
        std::vector<RandomPage> pages;
        int32_t next = 0;
        for (int64_t rows : {64, 17, 1, 16, 3}) {
          pages.emplace_back(d, rows, hd, next, rng);
          next += static_cast<int32_t>(2 * rows);
        }
        std::vector<KvPageView> views;
        for (const RandomPage& p : pages) views.push_back(p.view());
        const std::vector<float> q = RandomFloats(n_q * hd, rng(), -2, 2);
        std::vector<int32_t> q_pos(n_q);
        for (int32_t& p : q_pos) p = static_cast<int32_t>(rng() % (next + 2)) - 1;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        std::vector<float> got(n_q * hd, NAN), ref(n_q * hd, NAN);
        AttendPaged(got.data(), q.data(), q_pos.data(), views, scale, n_q, hd);
        internal::AttendPagedRef(ref.data(), q.data(), q_pos.data(), views, scale, n_q, hd);
        EXPECT_TRUE(AllClose(got, ref, 1e-5f, 1e-5f));
      }
    }
  }
}

// A head whose pages differ in format (KIVI's full pages and an fp16 last page; int8 beside
// fp32): both paths, decode-sized and prefill-sized, equal the reference.
TEST(AttentionTest, PagesOfMixedFormatsEqualTheReference) {
  std::mt19937 rng(5);
  const std::pair<KvDType, KvDType> mixes[] = {{KvDType::kKivi4, KvDType::kF16},
                                               {KvDType::kKivi2, KvDType::kF16},
                                               {KvDType::kI8, KvDType::kF32}};
  for (const auto& [full, last] : mixes) {
    for (int64_t n_q : {1, 5, 9, 20}) {
      const int64_t hd = 64;
      std::vector<RandomPage> pages;
      pages.emplace_back(full, 64, hd, 0, rng);
      pages.emplace_back(full, 64, hd, 128, rng);
      pages.emplace_back(last, 23, hd, 256, rng);
      std::vector<KvPageView> views;
      for (const RandomPage& p : pages) views.push_back(p.view());
      const std::vector<float> q = RandomFloats(n_q * hd, rng(), -2, 2);
      std::vector<int32_t> q_pos(n_q);
      for (int32_t& p : q_pos) p = static_cast<int32_t>(rng() % 310);
      std::vector<float> got(n_q * hd, NAN), ref(n_q * hd, NAN);
      AttendPaged(got.data(), q.data(), q_pos.data(), views, 0.125f, n_q, hd);
      internal::AttendPagedRef(ref.data(), q.data(), q_pos.data(), views, 0.125f, n_q, hd);
      EXPECT_TRUE(AllClose(got, ref, 1e-5f, 1e-5f))
          << static_cast<int>(full) << "+" << static_cast<int>(last) << " n_q " << n_q;
    }
  }
}

// One fp32 page is AttendRagged, bit for bit.
TEST(AttentionTest, OneFp32PageIsAttendRagged) {
  const int64_t hd = 64, T = 77, n_q = 9;
  const std::vector<float> k = RandomFloats(T * hd, 21), v = RandomFloats(T * hd, 22),
                           q = RandomFloats(n_q * hd, 23);
  std::vector<int32_t> kv_pos(T), q_pos(n_q);
  std::iota(kv_pos.begin(), kv_pos.end(), 0);
  for (int64_t i = 0; i < n_q; ++i) q_pos[i] = static_cast<int32_t>(8 * i);
  std::vector<float> ragged(n_q * hd), paged(n_q * hd), scratch(T);
  AttendRagged(ragged.data(), q.data(), q_pos.data(), k.data(), v.data(), kv_pos.data(), 0.125f,
               scratch.data(), n_q, T, hd);
  const KvPageView page{.k = k.data(), .v = v.data(), .pos = kv_pos.data(), .rows = T};
  AttendPaged(paged.data(), q.data(), q_pos.data(), std::span(&page, 1), 0.125f, n_q, hd);
  EXPECT_TRUE(AllClose(paged, ragged, 0.0f, 0.0f));
}

}  // namespace
}  // namespace glimpse::kernels
