#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/test_util.h"

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

}  // namespace
}  // namespace glimpse::kernels
