#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/test_util.h"
#include "kernels/quant.h"

namespace glimpse::kernels {
namespace {

using testing::AllClose;
using testing::RandomFloats;

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

// Random pages: every byte pattern of the narrow formats appears, scales vary by row.
struct RandomPage {
  KvDType dtype;
  int64_t rows, head_dim;
  std::vector<uint8_t> k, v;
  std::vector<float> k_scale, v_scale;
  std::vector<int32_t> pos;

  RandomPage(KvDType d, int64_t n, int64_t hd, int32_t first_pos, std::mt19937& rng)
      : dtype(d), rows(n), head_dim(hd) {
    const int64_t elt = d == KvDType::kF32 ? 4 : d == KvDType::kF16 || d == KvDType::kBF16 ? 2 : 1;
    k.resize(n * hd * elt);
    v.resize(n * hd * elt);
    const std::vector<float> kf = RandomFloats(n * hd, rng(), -2, 2),
                             vf = RandomFloats(n * hd, rng());
    for (int64_t i = 0; i < n * hd; ++i) {
      switch (d) {
        case KvDType::kF32:
          std::memcpy(&k[4 * i], &kf[i], 4);
          std::memcpy(&v[4 * i], &vf[i], 4);
          break;
        case KvDType::kF16:
        case KvDType::kBF16: {
          const uint16_t hk = d == KvDType::kF16 ? Fp32ToFp16(kf[i]) : Bf16Bits(kf[i]);
          const uint16_t hv = d == KvDType::kF16 ? Fp32ToFp16(vf[i]) : Bf16Bits(vf[i]);
          std::memcpy(&k[2 * i], &hk, 2);
          std::memcpy(&v[2 * i], &hv, 2);
          break;
        }
        case KvDType::kI8:
          k[i] = static_cast<uint8_t>(static_cast<int8_t>(rng() % 255 - 127));
          v[i] = static_cast<uint8_t>(static_cast<int8_t>(rng() % 255 - 127));
          break;
        case KvDType::kE4M3: {
          auto code = [&] {
            uint8_t c;
            do c = static_cast<uint8_t>(rng());
            while ((c & 0x7F) == 0x7F);  // no NaN here
            return c;
          };
          k[i] = code();
          v[i] = code();
          break;
        }
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      k_scale.push_back(0.001f + 0.01f * static_cast<float>(rng() % 100) / 100);
      v_scale.push_back(0.001f + 0.01f * static_cast<float>(rng() % 100) / 100);
      pos.push_back(first_pos + static_cast<int32_t>(r) * 2);
    }
  }
  static uint16_t Bf16Bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return static_cast<uint16_t>(u >> 16);
  }
  KvPageView view() const {
    return {.dtype = dtype,
            .k = k.data(),
            .v = v.data(),
            .k_scale = k_scale.data(),
            .v_scale = v_scale.data(),
            .pos = pos.data(),
            .rows = rows};
  }
};

constexpr KvDType kDTypes[] = {KvDType::kF32, KvDType::kF16, KvDType::kBF16, KvDType::kI8,
                               KvDType::kE4M3};

TEST(AttentionTest, VectorDequantizationEqualsTheReferenceForEveryFormat) {
  std::mt19937 rng(3);
  for (KvDType d : kDTypes) {
    for (int64_t hd : {8, 64, 128, 5}) {
      const RandomPage page(d, 7, hd, 0, rng);
      std::vector<float> got(hd), ref(hd);
      for (int64_t r = 0; r < page.rows; ++r) {
        DequantizeKvRow(got.data(), d, page.k.data(), page.k_scale.data(), r, hd);
        internal::DequantizeKvRowRef(ref.data(), d, page.k.data(), page.k_scale.data(), r, hd);
        ASSERT_TRUE(AllClose(got, ref, 0.0f, 0.0f)) << static_cast<int>(d) << " hd " << hd;
      }
    }
  }
  // Every E4M3 code, NaN included, through the vector path.
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  const float scale[32] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,
                           0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,
                           0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<float> got(8);
  for (int64_t r = 0; r < 32; ++r) {
    DequantizeKvRow(got.data(), KvDType::kE4M3, codes.data(), scale, r, 8);
    for (int64_t c = 0; c < 8; ++c) {
      const float want = internal::E4m3ToFp32(codes[r * 8 + c]) * 0.5f;
      EXPECT_TRUE(got[c] == want || (std::isnan(got[c]) && std::isnan(want))) << r * 8 + c;
    }
  }
}

// Pages of every format and ragged sizes (partial tiles, partial last pages), positions that hide
// some entries from some rows: the fast path equals the reference (rows dequantised, then
// AttendRaggedRef) within fp32 reordering.
TEST(AttentionTest, PagedEqualsTheDequantisedReference) {
  std::mt19937 rng(11);
  for (KvDType d : kDTypes) {
    for (int64_t hd : {8, 64, 6}) {
      for (int64_t n_q : {1, 3, 7}) {
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
