#include "core/model/kv_cache.h"

#include <vector>

#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

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
  cache.Append(0, h, k.data(), v.data(), pos.data(), n);
}

TEST(KvCacheTest, HeadsAreIndependentAndRaggedAfterRetain) {
  KvCache cache(/*n_layers=*/2, /*n_kv_heads=*/3, /*head_dim=*/4);
  FillHead(cache, 0, 5);
  FillHead(cache, 1, 5);
  ASSERT_TRUE(cache.Retain(0, 0, {0, 2, 4}).ok());
  ASSERT_TRUE(cache.Retain(0, 1, {3}).ok());

  const KvHead& h0 = cache.head(0, 0);
  EXPECT_EQ(h0.positions, (std::vector<int32_t>{10, 12, 14}));
  EXPECT_EQ(h0.keys[1 * 4 + 3], 12.0f);
  EXPECT_EQ(h0.values[2 * 4], -14.0f);
  EXPECT_EQ(cache.head(0, 1).positions, (std::vector<int32_t>{13}));
  EXPECT_EQ(cache.head(1, 0).size(), 0);
  EXPECT_EQ(cache.TotalEntries(), 4);
  EXPECT_EQ(cache.TotalBytes(), 4 * (2 * 4 * 4 + 4));
}

TEST(KvCacheTest, RetainRejectsBadIndicesAndLeavesHeadUnchanged) {
  KvCache cache(1, 1, 2);
  FillHead(cache, 0, 3);
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, 3}, {2, 1}, {1, 1}, {-1}}) {
    const absl::Status status = cache.Retain(0, 0, bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("layer 0, kv_head 0"), std::string::npos) << status;
  }
  EXPECT_EQ(cache.head(0, 0).positions, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(cache.Retain(0, 5, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCacheTest, RetainEverythingAndNothing) {
  KvCache cache(1, 1, 2);
  FillHead(cache, 0, 3);
  ASSERT_TRUE(cache.Retain(0, 0, {0, 1, 2}).ok());
  EXPECT_EQ(cache.head(0, 0).size(), 3);
  ASSERT_TRUE(cache.Retain(0, 0, {}).ok());
  EXPECT_EQ(cache.head(0, 0).size(), 0);
  EXPECT_TRUE(cache.head(0, 0).keys.empty());
}

}  // namespace
}  // namespace glimpse::model
