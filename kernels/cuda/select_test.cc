#include "kernels/cuda/select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/test_util.h"

namespace glimpse::kernels::cuda {
namespace {

class CudaSelectTest : public testing::DeviceTest {};

// core/eviction's order within a row (selection.cc's Better): higher score, then lower index;
// NaN last.
std::vector<int32_t> ReferenceTopK(const float* row, int64_t n, int64_t k) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    const bool na = std::isnan(row[a]), nb = std::isnan(row[b]);
    if (na != nb) return nb;
    if (!na && row[a] != row[b]) return row[a] > row[b];
    return a < b;
  };
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

TEST_F(CudaSelectTest, TopKEqualsCoreEvictionsOrderWithTiesInfAndNan) {
  std::mt19937 rng(5);
  for (const int64_t n : {1, 7, 1000, 4099, 40000}) {
    const int64_t rows = 3;
    std::vector<float> scores(rows * n);
    for (float& x : scores) x = static_cast<float>(rng() % 50) / 7.0f - 3.0f;  // many ties
    scores[0] = INFINITY;                                                      // a forced sink
    if (n > 5) scores[n + 3] = NAN;                                            // row 1: a NaN
    if (n > 5) scores[2 * n + 4] = -0.0f;  // row 2: −0 ties +0
    if (n > 5) scores[2 * n + 2] = 0.0f;
    for (const int64_t k : {int64_t{0}, int64_t{1}, n / 3, n - 1, n}) {
      if (k < 0) continue;
      DeviceBuffer<float> d(scores);
      DeviceBuffer<int32_t> kept(std::max<int64_t>(1, rows * k));
      ASSERT_EQ(TopKRows(kept.data(), d.data(), rows, n, k, nullptr), cudaSuccess);
      const std::vector<int32_t> got = kept.ToHost();
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<int32_t> want = ReferenceTopK(&scores[r * n], n, k);
        const std::vector<int32_t> row(got.begin() + r * k, got.begin() + (r + 1) * k);
        ASSERT_EQ(row, want) << "n " << n << " k " << k << " row " << r;
      }
    }
  }
  EXPECT_EQ(TopKRows(nullptr, nullptr, 1, 5, 6, nullptr), cudaErrorInvalidValue);
}

// Compaction copies the kept rows' bytes, scales and positions per head.
TEST_F(CudaSelectTest, CompactGathersKeptRowsPerHead) {
  constexpr int64_t kHeads = 3, kDim = 64, kSrcCap = 100, kN = 90, kKeep = 17, kDstCap = 20;
  std::mt19937 rng(9);
  for (const KvDType dtype : {KvDType::kF16, KvDType::kI8}) {
    const int64_t row_bytes = kDim * (dtype == KvDType::kI8 ? 1 : 2);
    std::vector<uint8_t> k(kHeads * kSrcCap * row_bytes), v(k.size());
    for (auto* x : {&k, &v}) {
      for (uint8_t& b : *x) b = static_cast<uint8_t>(rng());
    }
    std::vector<float> ks(kHeads * kSrcCap), vs(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) ks[i] = 0.5f + i, vs[i] = 1.5f + i;
    std::vector<int32_t> pos(kSrcCap), kept;
    for (int64_t i = 0; i < kSrcCap; ++i) pos[i] = static_cast<int32_t>(3 * i + 1);
    for (int64_t g = 0; g < kHeads; ++g) {
      std::vector<int32_t> all(kN);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(kKeep);
      std::sort(all.begin(), all.end());
      kept.insert(kept.end(), all.begin(), all.end());
    }
    DeviceBuffer<uint8_t> dk(k), dv(v), ok(kHeads * kDstCap * row_bytes), ov(ok.size());
    DeviceBuffer<float> dks(ks), dvs(vs), oks(kHeads * kDstCap), ovs(oks.size());
    DeviceBuffer<int32_t> dpos(pos), dkept(kept), opos(kHeads * kKeep);
    const bool i8 = dtype == KvDType::kI8;
    const KvCacheView src{.dtype = dtype,
                          .k = dk.data(),
                          .v = dv.data(),
                          .k_scale = i8 ? dks.data() : nullptr,
                          .v_scale = i8 ? dvs.data() : nullptr,
                          .capacity = kSrcCap};
    const KvCacheView dst{.dtype = dtype,
                          .k = ok.data(),
                          .v = ov.data(),
                          .k_scale = i8 ? oks.data() : nullptr,
                          .v_scale = i8 ? ovs.data() : nullptr,
                          .capacity = kDstCap};
    ASSERT_EQ(
        CompactKv(dst, opos.data(), src, dpos.data(), dkept.data(), kKeep, kHeads, kDim, nullptr),
        cudaSuccess);
    const std::vector<uint8_t> gk = ok.ToHost(), gv = ov.ToHost();
    const std::vector<float> gks = oks.ToHost(), gvs = ovs.ToHost();
    const std::vector<int32_t> gpos = opos.ToHost();
    for (int64_t g = 0; g < kHeads; ++g) {
      for (int64_t i = 0; i < kKeep; ++i) {
        const int64_t from = g * kSrcCap + kept[g * kKeep + i], to = g * kDstCap + i;
        ASSERT_TRUE(std::equal(gk.begin() + to * row_bytes, gk.begin() + (to + 1) * row_bytes,
                               k.begin() + from * row_bytes));
        ASSERT_TRUE(std::equal(gv.begin() + to * row_bytes, gv.begin() + (to + 1) * row_bytes,
                               v.begin() + from * row_bytes));
        if (i8) {
          ASSERT_EQ(gks[to], ks[from]);
          ASSERT_EQ(gvs[to], vs[from]);
        }
        ASSERT_EQ(gpos[g * kKeep + i], pos[kept[g * kKeep + i]]);
      }
    }
  }
  const KvCacheView small{.dtype = KvDType::kF16, .capacity = 4};
  EXPECT_EQ(CompactKv(small, nullptr, small, nullptr, nullptr, 5, 1, 64, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace glimpse::kernels::cuda
