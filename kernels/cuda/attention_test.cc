#include "kernels/cuda/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_stats.h"
#include "kernels/cpu/test_pages.h"
#include "kernels/cpu/test_util.h"
#include "kernels/cuda/attention_stats.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/test_util.h"

namespace glimpse::kernels::cuda {
namespace {

using kernels::testing::AllClose;
using kernels::testing::kDTypes;
using kernels::testing::RandomFloats;
using kernels::testing::RandomPage;

class CudaAttentionTest : public testing::DeviceTest {};

// A prompt chunk of n_q tokens after n_kv − n_q cached entries: the cached ones at even positions
// (as if every other token had been evicted), the chunk's right after them; optionally every
// entry shuffled (attention is by position, not index). Row 0 sits before every entry, so it
// sees nothing. Inputs are fp16-rounded so the CPU reference reads what the device reads.
struct PrefillCase {
  int64_t n_q, n_kv, n_heads, n_kv_heads, head_dim;
  bool shuffled;
  bool head_major = false;  // K and V as a cache holds them (AppendKv), with spare capacity

  std::vector<float> q = {}, k = {}, v = {};
  std::vector<int32_t> q_pos = {}, kv_pos = {};

  void Fill() {
    q = testing::RoundedToHalf(RandomFloats(n_q * n_heads * head_dim, 41));
    k = testing::RoundedToHalf(RandomFloats(n_kv * n_kv_heads * head_dim, 42, -3, 3));
    v = testing::RoundedToHalf(RandomFloats(n_kv * n_kv_heads * head_dim, 43));
    const int64_t cached = n_kv - n_q;
    kv_pos.resize(n_kv);
    for (int64_t j = 0; j < cached; ++j) kv_pos[j] = static_cast<int32_t>(2 * j);
    for (int64_t i = 0; i < n_q; ++i) {
      kv_pos[cached + i] = static_cast<int32_t>(2 * cached + i);
      q_pos.push_back(kv_pos[cached + i]);
    }
    q_pos[0] = -1;
    if (shuffled) {
      // Keys and values move together: shuffle entry indices.
      std::vector<int64_t> order(n_kv);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(44));
      std::vector<float> k2(k.size()), v2(v.size());
      std::vector<int32_t> pos2(n_kv);
      const int64_t row = n_kv_heads * head_dim;
      for (int64_t j = 0; j < n_kv; ++j) {
        std::copy_n(&k[order[j] * row], row, &k2[j * row]);
        std::copy_n(&v[order[j] * row], row, &v2[j * row]);
        pos2[j] = kv_pos[order[j]];
      }
      k.swap(k2);
      v.swap(v2);
      kv_pos.swap(pos2);
    }
  }

  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

  // Rows [begin, end) of q-head h, [rows, head_dim].
  std::vector<float> QHead(int64_t h, int64_t begin, int64_t end) const {
    std::vector<float> out;
    for (int64_t i = begin; i < end; ++i) {
      const float* row = &q[(i * n_heads + h) * head_dim];
      out.insert(out.end(), row, row + head_dim);
    }
    return out;
  }
  std::vector<float> KvHead(const std::vector<float>& x, int64_t g) const {
    std::vector<float> out;
    for (int64_t j = 0; j < n_kv; ++j) {
      const float* row = &x[(j * n_kv_heads + g) * head_dim];
      out.insert(out.end(), row, row + head_dim);
    }
    return out;
  }
};

// K and V on the device as the case lays them out, through AppendKv for a head-major cache.
struct DeviceKv {
  DeviceBuffer<uint16_t> k, v;
  KvStrides strides;
  explicit DeviceKv(const PrefillCase& c) {
    if (!c.head_major) {
      k = DeviceBuffer<uint16_t>(testing::HalfBits(c.k));
      v = DeviceBuffer<uint16_t>(testing::HalfBits(c.v));
      strides = KvStrides::Interleaved(c.n_kv_heads, c.head_dim);
      return;
    }
    const int64_t capacity = c.n_kv + 5, split = c.n_kv / 3;  // appended in two calls
    k = DeviceBuffer<uint16_t>(c.n_kv_heads * capacity * c.head_dim);
    v = DeviceBuffer<uint16_t>(c.n_kv_heads * capacity * c.head_dim);
    DeviceBuffer<float> k32(c.k), v32(c.v);
    const int64_t row = c.n_kv_heads * c.head_dim;
    const KvCacheView cache{
        .dtype = KvDType::kF16, .k = k.data(), .v = v.data(), .capacity = capacity};
    EXPECT_EQ(AppendKv(cache, k32.data(), v32.data(), split, 0, c.n_kv_heads, c.head_dim, nullptr),
              cudaSuccess);
    EXPECT_EQ(AppendKv(cache, k32.data() + split * row, v32.data() + split * row, c.n_kv - split,
                       split, c.n_kv_heads, c.head_dim, nullptr),
              cudaSuccess);
    strides = KvStrides::HeadMajor(capacity, c.head_dim);
  }
};

void ExpectPrefillMatchesTheCpu(PrefillCase c) {
  c.Fill();
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  DeviceBuffer<uint16_t> dq(testing::HalfBits(c.q));
  const DeviceKv kv(c);
  DeviceBuffer<int32_t> dqp(c.q_pos), dkp(c.kv_pos);
  DeviceBuffer<float> out(c.n_q * c.n_heads * hd), lse(c.n_heads * c.n_q);
  ASSERT_EQ(AttendPrefill(out.data(), lse.data(), dq.data(), dqp.data(), kv.k.data(), kv.v.data(),
                          kv.strides, dkp.data(), c.scale(), c.n_q, c.n_kv, c.n_heads, c.n_kv_heads,
                          hd, nullptr),
            cudaSuccess);
  const std::vector<float> got = out.ToHost(), got_lse = lse.ToHost();
  std::vector<float> scratch(c.n_kv);
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const int64_t g = h / group;
    const std::vector<float> qh = c.QHead(h, 0, c.n_q), kg = c.KvHead(c.k, g),
                             vg = c.KvHead(c.v, g);
    std::vector<float> ref(c.n_q * hd);
    AttendRagged(ref.data(), qh.data(), c.q_pos.data(), kg.data(), vg.data(), c.kv_pos.data(),
                 c.scale(), scratch.data(), c.n_q, c.n_kv, hd);
    for (int64_t i = 0; i < c.n_q; ++i) {
      // Probabilities pass through fp16 for P·V: 2⁻¹¹ of each weight, values within ±1.
      ASSERT_TRUE(AllClose(&got[(i * c.n_heads + h) * hd], &ref[i * hd], hd, 2e-3f, 0.0f))
          << "head " << h << " row " << i;
      double sum = 0;
      for (int64_t j = 0; j < c.n_kv; ++j) {
        if (c.kv_pos[j] > c.q_pos[i]) continue;
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) s += double{qh[i * hd + d]} * kg[j * hd + d];
        sum += std::exp(s * c.scale());
      }
      const float want = sum > 0 ? static_cast<float>(std::log(sum)) : -INFINITY;
      if (sum == 0) {
        EXPECT_EQ(got_lse[h * c.n_q + i], -INFINITY) << h << "," << i;
      } else {
        EXPECT_NEAR(got_lse[h * c.n_q + i], want, 1e-4) << h << "," << i;
      }
    }
  }
}

TEST_F(CudaAttentionTest, PrefillEqualsAttendRaggedOverRaggedShuffledKeys) {
  ExpectPrefillMatchesTheCpu(
      {.n_q = 77, .n_kv = 150, .n_heads = 6, .n_kv_heads = 2, .head_dim = 64, .shuffled = true});
  ExpectPrefillMatchesTheCpu(
      {.n_q = 77, .n_kv = 150, .n_heads = 6, .n_kv_heads = 2, .head_dim = 128, .shuffled = true});
}

TEST_F(CudaAttentionTest, PrefillEqualsAttendRaggedOverManyTilesOfAPrompt) {
  ExpectPrefillMatchesTheCpu(
      {.n_q = 300, .n_kv = 300, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64, .shuffled = false});
  ExpectPrefillMatchesTheCpu(
      {.n_q = 129, .n_kv = 700, .n_heads = 4, .n_kv_heads = 4, .head_dim = 128, .shuffled = false});
}

TEST_F(CudaAttentionTest, PrefillReadsAHeadMajorCacheFilledByAppendKv) {
  for (const int64_t head_dim : {16, 32, 64, 128}) {
    ExpectPrefillMatchesTheCpu({.n_q = 50,
                                .n_kv = 133,
                                .n_heads = 4,
                                .n_kv_heads = 2,
                                .head_dim = head_dim,
                                .shuffled = false,
                                .head_major = true});
  }
}

TEST_F(CudaAttentionTest, AppendKvRefusesEntriesPastTheCapacity) {
  const KvCacheView cache{.capacity = 10};
  EXPECT_EQ(AppendKv(cache, nullptr, nullptr, 4, 7, 1, 64, nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaAttentionTest, PrefillRefusesHeadDimsItHasNoTileFor) {
  EXPECT_EQ(AttendPrefill(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, {}, nullptr, 1.0f,
                          1, 1, 1, 1, 96, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(AttendPrefill(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, {}, nullptr, 1.0f,
                          1, 1, 3, 2, 64, nullptr),
            cudaErrorInvalidValue);
}

// The scorers' statistic from the prefill's log-sum-exp equals kernels::
// AccumulateAttentionReference over the group's window rows.
TEST_F(CudaAttentionTest, WindowAttentionFromTheLseEqualsTheCpuStatistic) {
  PrefillCase c{
      .n_q = 90, .n_kv = 200, .n_heads = 6, .n_kv_heads = 2, .head_dim = 64, .shuffled = true};
  c.Fill();
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads, begin = 90 - 19, end = 90;
  DeviceBuffer<uint16_t> dq(testing::HalfBits(c.q)), dk(testing::HalfBits(c.k)),
      dv(testing::HalfBits(c.v));
  DeviceBuffer<int32_t> dqp(c.q_pos), dkp(c.kv_pos);
  DeviceBuffer<float> out(c.n_q * c.n_heads * hd), lse(c.n_heads * c.n_q);
  ASSERT_EQ(AttendPrefill(out.data(), lse.data(), dq.data(), dqp.data(), dk.data(), dv.data(),
                          KvStrides::Interleaved(c.n_kv_heads, hd), dkp.data(), c.scale(), c.n_q,
                          c.n_kv, c.n_heads, c.n_kv_heads, hd, nullptr),
            cudaSuccess);
  std::vector<float> start(c.n_kv_heads * c.n_kv, 0.5f);  // accumulated into, not cleared
  DeviceBuffer<float> acc(start);
  ASSERT_EQ(AccumulateAttention(acc.data(), dq.data(), lse.data(), dqp.data(), begin, end,
                                dk.data(), KvStrides::Interleaved(c.n_kv_heads, hd), dkp.data(),
                                c.scale(), c.n_q, c.n_kv, c.n_heads, c.n_kv_heads, hd, nullptr),
            cudaSuccess);
  const std::vector<float> got = acc.ToHost();
  std::vector<float> scratch(c.n_kv);
  for (int64_t g = 0; g < c.n_kv_heads; ++g) {
    std::vector<float> rows;
    std::vector<int32_t> pos;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const std::vector<float> qh = c.QHead(h, begin, end);
      rows.insert(rows.end(), qh.begin(), qh.end());
      pos.insert(pos.end(), c.q_pos.begin() + begin, c.q_pos.begin() + end);
    }
    std::vector<float> ref(c.n_kv, 0.5f);
    const std::vector<float> kg = c.KvHead(c.k, g);
    AccumulateAttentionReference(ref.data(), rows.data(), pos.data(), kg.data(), c.kv_pos.data(),
                                 c.scale(), scratch.data(), static_cast<int64_t>(pos.size()),
                                 c.n_kv, hd);
    EXPECT_TRUE(AllClose(&got[g * c.n_kv], ref.data(), c.n_kv, 1e-5f, 1e-3f)) << "kv-head " << g;
  }
}

// Pages copied to the device, and the views of them both sides read.
struct DevicePages {
  std::vector<RandomPage> host;
  std::vector<DeviceBuffer<uint8_t>> bytes;
  std::vector<DeviceBuffer<float>> scales;
  std::vector<DeviceBuffer<int32_t>> positions;
  std::vector<KvPageView> host_views, device_views;

  void Add(RandomPage page) {
    host.push_back(std::move(page));
    const RandomPage& p = host.back();
    KvPageView view = p.view();
    bytes.emplace_back(p.k);
    view.k = bytes.back().data();
    bytes.emplace_back(p.v);
    view.v = bytes.back().data();
    if (view.k_scale != nullptr) {
      scales.emplace_back(p.k_scale);
      view.k_scale = scales.back().data();
      scales.emplace_back(p.v_scale);
      view.v_scale = scales.back().data();
    }
    positions.emplace_back(p.pos);
    view.pos = positions.back().data();
    device_views.push_back(view);
  }
  void Seal() {
    for (const RandomPage& p : host) host_views.push_back(p.view());
  }
};

// Sequences of 1, 5 and 11 pages (64 rows; a row format's last page part full, a KIVI sequence's
// last page fp16, as the pool keeps them) with 1, 3 and 8 query rows at positions that hide part
// of the cache from the early rows.
void ExpectPagedMatchesTheCpu(KvDType dtype, int64_t head_dim) {
  std::mt19937 rng(51);
  const bool kivi = dtype == KvDType::kKivi4 || dtype == KvDType::kKivi2;
  const int64_t page_counts[] = {1, 5, 11}, rows_of_query[] = {1, 3, 8};
  DevicePages pages;
  std::vector<PagedQuery> queries;
  std::vector<DeviceBuffer<float>> qs, outs;
  std::vector<DeviceBuffer<int32_t>> qps;
  std::vector<std::vector<float>> host_q;
  std::vector<std::vector<int32_t>> host_qp;
  int64_t max_pages = 0;
  for (int s = 0; s < 3; ++s) {
    const int64_t n_pages = page_counts[s], n_q = rows_of_query[s];
    const int32_t begin = static_cast<int32_t>(pages.device_views.size());
    for (int64_t p = 0; p < n_pages; ++p) {
      const bool last = p == n_pages - 1;
      const KvDType d = kivi && last && n_pages > 1 ? KvDType::kF16 : dtype;
      const int64_t rows = last && !(kivi && n_pages == 1) ? 37 : 64;
      pages.Add(RandomPage(d, rows, head_dim, static_cast<int32_t>(p * 128), rng));
    }
    max_pages = std::max(max_pages, n_pages);
    const int32_t top = static_cast<int32_t>(n_pages * 128);
    std::vector<int32_t> qp(n_q);
    for (int64_t i = 0; i < n_q; ++i) qp[i] = static_cast<int32_t>(top * (i + 1) / n_q);
    qp[0] = std::min(qp[0], 100);  // the first row sees only part of the first page
    host_q.push_back(RandomFloats(n_q * head_dim, 60 + s));
    host_qp.push_back(qp);
    qs.emplace_back(host_q.back());
    qps.emplace_back(qp);
    outs.emplace_back(n_q * head_dim);
    queries.push_back({.out = outs.back().data(),
                       .q = qs.back().data(),
                       .q_pos = qps.back().data(),
                       .n_q = static_cast<int32_t>(n_q),
                       .page_begin = begin,
                       .page_end = static_cast<int32_t>(pages.device_views.size())});
  }
  pages.Seal();
  DeviceBuffer<PagedQuery> dqueries(queries);
  DeviceBuffer<KvPageView> dviews(pages.device_views);
  DeviceBuffer<float> scratch(PagedScratchFloats(queries.size(), max_pages, head_dim));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  ASSERT_EQ(AttendPagedBatch(dqueries.data(), queries.size(), dviews.data(), max_pages, scale,
                             head_dim, scratch.data(), nullptr),
            cudaSuccess);
  for (size_t s = 0; s < queries.size(); ++s) {
    const auto views =
        std::span<const KvPageView>(pages.host_views)
            .subspan(queries[s].page_begin, queries[s].page_end - queries[s].page_begin);
    std::vector<float> ref(queries[s].n_q * head_dim);
    AttendPaged(ref.data(), host_q[s].data(), host_qp[s].data(), views, scale, queries[s].n_q,
                head_dim);
    EXPECT_TRUE(AllClose(outs[s].ToHost().data(), ref.data(), ref.size(), 1e-4f, 1e-3f))
        << "format " << static_cast<int>(dtype) << " head_dim " << head_dim << " query " << s;
  }
}

TEST_F(CudaAttentionTest, PagedEqualsAttendPagedForEveryFormat) {
  for (const KvDType dtype : kDTypes) {
    for (const int64_t head_dim : {16, 64, 96, 128}) ExpectPagedMatchesTheCpu(dtype, head_dim);
  }
}

TEST_F(CudaAttentionTest, PagedRefusesHeadDimsItHasNoLanesFor) {
  EXPECT_EQ(AttendPagedBatch(nullptr, 1, nullptr, 1, 1.0f, 300, nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace glimpse::kernels::cuda
