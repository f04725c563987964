#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops_internal.h"
#include "kernels/cpu/test_util.h"

namespace glimpse::kernels {
namespace {

using testing::AllClose;
using testing::OddSizes;
using testing::RandomFloats;

TEST(OpsTest, RmsNormHandComputed) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 2};
  float out[4];
  RmsNorm(out, x, w, 0.0f, 1, 4);
  const float s = 1.0f / std::sqrt(7.5f);  // mean of squares = 30 / 4
  const float want[4] = {s, 2 * s, 3 * s, 8 * s};
  EXPECT_TRUE(AllClose(out, want, 4, 0, 1e-6f));
  // eps sits inside the square root: 1 / sqrt(1 + 1).
  const float ones[2] = {1, 1};
  RmsNorm(out, ones, ones, 1.0f, 1, 2);
  EXPECT_FLOAT_EQ(out[0], 1.0f / std::sqrt(2.0f));
  const float zeros[2] = {0, 0};
  RmsNorm(out, zeros, ones, 1e-6f, 1, 2);
  EXPECT_EQ(out[0], 0.0f);
}

TEST(OpsTest, RmsNormFastMatchesReferenceInPlace) {
  for (int64_t rows : {1, 3, 37}) {
    for (int64_t dim : OddSizes()) {
      std::vector<float> x = RandomFloats(rows * dim, dim, -3, 3), ref(rows * dim);
      const std::vector<float> w = RandomFloats(dim, dim + 1);
      internal::RmsNormRef(ref.data(), x.data(), w.data(), 1e-5f, rows, dim);
      RmsNorm(x.data(), x.data(), w.data(), 1e-5f, rows, dim);  // aliased
      EXPECT_TRUE(AllClose(x, ref, 1e-6f, 1e-5f)) << rows << "x" << dim;
    }
  }
}

TEST(OpsTest, RopeHandComputedBothStyles) {
  const float inv_freq[2] = {1.0f, 0.5f};
  const int32_t pos[2] = {0, 1};
  // Two tokens, one head of 4 channels; token 0 (pos 0) is unchanged.
  float inter[8] = {1, 2, 3, 4, 1, 0, 1, 0};
  Rope(inter, pos, inv_freq, RopeStyle::kInterleaved, 2, 1, 4);
  const float want_inter[8] = {
      1, 2, 3, 4, std::cos(1.f), std::sin(1.f), std::cos(.5f), std::sin(.5f)};
  EXPECT_TRUE(AllClose(inter, want_inter, 8, 1e-7f, 1e-6f));
  float half[8] = {1, 2, 3, 4, 1, 1, 0, 0};  // pairs (0, 2) and (1, 3)
  Rope(half, pos, inv_freq, RopeStyle::kHalf, 2, 1, 4);
  const float want_half[8] = {
      1, 2, 3, 4, std::cos(1.f), std::cos(.5f), std::sin(1.f), std::sin(.5f)};
  EXPECT_TRUE(AllClose(half, want_half, 8, 1e-7f, 1e-6f));
}

// kHalf equals kInterleaved after moving channel (i, i + d/2) to (2i, 2i + 1), for every head;
// and q·k after rotation depends only on the position difference.
TEST(OpsTest, RopeStylesArePermutationsAndRelative) {
  const int64_t tokens = 7, heads = 3, dim = 64;
  std::vector<float> inv_freq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / dim);
  std::vector<int32_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(5 * t + 3);
  std::vector<float> half = RandomFloats(tokens * heads * dim, 9), inter(half.size());
  for (int64_t r = 0; r < tokens * heads; ++r) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      inter[r * dim + 2 * i] = half[r * dim + i];
      inter[r * dim + 2 * i + 1] = half[r * dim + i + dim / 2];
    }
  }
  Rope(half.data(), pos.data(), inv_freq.data(), RopeStyle::kHalf, tokens, heads, dim);
  Rope(inter.data(), pos.data(), inv_freq.data(), RopeStyle::kInterleaved, tokens, heads, dim);
  for (int64_t r = 0; r < tokens * heads; ++r) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      ASSERT_EQ(inter[r * dim + 2 * i], half[r * dim + i]);
      ASSERT_EQ(inter[r * dim + 2 * i + 1], half[r * dim + i + dim / 2]);
    }
  }
  const std::vector<float> q = RandomFloats(dim, 1), k = RandomFloats(dim, 2);
  auto rotated_dot = [&](int32_t pq, int32_t pk) {
    std::vector<float> a = q, b = k;
    Rope(a.data(), &pq, inv_freq.data(), RopeStyle::kHalf, 1, 1, dim);
    Rope(b.data(), &pk, inv_freq.data(), RopeStyle::kHalf, 1, 1, dim);
    double dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += a[i] * b[i];
    return static_cast<float>(dot);
  };
  EXPECT_NEAR(rotated_dot(10, 7), rotated_dot(3, 0), 1e-4f);
}

TEST(OpsTest, SiluMulHandComputed) {
  const float gate[5] = {0, 1, -1, 100, -100}, up[5] = {3, 2, 1, 0.5f, 1};
  float out[5];
  SiluMul(out, gate, up, 5);
  const float want[5] = {0, 2 * 0.7310585786f, -0.2689414214f, 50, 0};
  EXPECT_TRUE(AllClose(out, want, 5, 1e-7f, 1e-6f));
}

TEST(OpsTest, SiluMulFastMatchesReferenceAliased) {
  for (int64_t n : {1, 3, 7, 19, 733 * 37}) {
    std::vector<float> gate = RandomFloats(n, n, -20, 20), ref(n);
    const std::vector<float> up = RandomFloats(n, n + 1, -2, 2);
    internal::SiluMulRef(ref.data(), gate.data(), up.data(), n);
    SiluMul(gate.data(), gate.data(), up.data(), n);
    EXPECT_TRUE(AllClose(gate, ref, 1e-7f, 1e-6f)) << n;
  }
}

TEST(OpsTest, AddAndAddBias) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  const float bias[3] = {10, 20, 30};
  AddBias(x, bias, 2, 3);
  const float want[6] = {11, 22, 33, 14, 25, 36};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x[i], want[i]);
  const float y[6] = {-11, -22, -33, 1, 1, 1};
  Add(x, y, 6);
  const float want2[6] = {0, 0, 0, 15, 26, 37};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x[i], want2[i]);
}

TEST(OpsTest, SoftmaxHandComputed) {
  float x[7] = {1, 2, 3, 1000, 1000, -INFINITY, 0};
  SoftmaxRows(x, 1, 3);
  const float want[3] = {0.0900305732f, 0.2447284711f, 0.6652409558f};
  EXPECT_TRUE(AllClose(x, want, 3, 1e-7f, 1e-6f));
  SoftmaxRows(x + 3, 2, 2);  // rows {1000, 1000} and {−inf, 0}
  const float want2[4] = {0.5f, 0.5f, 0.0f, 1.0f};
  EXPECT_TRUE(AllClose(x + 3, want2, 4, 1e-7f, 1e-6f));
}

TEST(OpsTest, SoftmaxFastMatchesReference) {
  for (int64_t rows : {1, 3, 37}) {
    for (int64_t n : OddSizes()) {
      std::vector<float> x = RandomFloats(rows * n, n, -30, 30);
      std::vector<float> ref = x;
      internal::SoftmaxRowsRef(ref.data(), rows, n);
      SoftmaxRows(x.data(), rows, n);
      EXPECT_TRUE(AllClose(x, ref, 1e-7f, 1e-5f)) << rows << "x" << n;
    }
  }
}

}  // namespace
}  // namespace glimpse::kernels
