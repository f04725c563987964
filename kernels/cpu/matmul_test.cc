#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_internal.h"
#include "kernels/cpu/test_util.h"

namespace glimpse::kernels {
namespace {

using testing::AllClose;
using testing::RandomFloats;

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kQ4_0, DType::kQ4_1,
                               DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kBF16};

// W[rows, cols] in `type`: dequantised from random fp32 values so every format holds similar
// magnitudes (block formats through their scale, plain ones directly).
std::vector<uint8_t> RandomWeights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = RandomFloats(rows * cols, seed);
  std::vector<uint8_t> w(RowBytes(type, cols) * rows);
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (type == DType::kF32) std::memcpy(w.data() + 4 * i, &f[i], 4);
    if (type == DType::kF16 || type == DType::kBF16) {
      uint32_t bits;
      std::memcpy(&bits, &f[i], 4);
      const uint16_t h = type == DType::kF16 ? Fp32ToFp16(f[i]) : static_cast<uint16_t>(bits >> 16);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
  }
  if (BlockElems(type) > 1) {
    // K-quants: their sub-block scales multiply d, so d is smaller; Q6_K keeps d last.
    const float d_base = BlockElems(type) == 32 ? 0.01f : 0.0005f;
    for (size_t b = 0; b < w.size(); b += BlockBytes(type)) {
      for (int64_t j = 0; j < BlockBytes(type); ++j) w[b + j] = static_cast<uint8_t>(rng());
      const uint16_t d = Fp32ToFp16(d_base + d_base * (rng() % 100) / 100.0f);
      const uint16_t m = Fp32ToFp16(-0.1f + 0.002f * (rng() % 100));
      std::memcpy(&w[type == DType::kQ6_K ? b + BlockBytes(type) - 2 : b], &d, 2);
      if (type == DType::kQ4_1) std::memcpy(&w[b + 2], &m, 2);
      if (type == DType::kQ4_K) std::memcpy(&w[b + 2], &d, 2);  // dmin
    }
  }
  return w;
}

struct Case {
  DType type;
  int64_t rows, cols, m;
};

// The reference: fp32 x times the dequantised W, summed in double (what both paths compute up to
// fp32 summation order). `scale` = max_t,r Σ|w·x|, the size of the terms, which sets the absolute
// tolerance.
struct Reference {
  std::vector<float> exact;
  float scale = 0;
};

Reference ComputeReference(const std::vector<uint8_t>& w, const std::vector<float>& x,
                           const Case& c) {
  Reference ref;
  ref.exact.resize(c.m * c.rows);
  const int64_t w_stride = RowBytes(c.type, c.cols);
  std::vector<float> wd(c.cols);
  for (int64_t r = 0; r < c.rows; ++r) {
    internal::DequantizeRowRef(wd.data(), w.data() + r * w_stride, c.type, c.cols);
    for (int64_t t = 0; t < c.m; ++t) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        sum += static_cast<double>(wd[k]) * x[t * c.cols + k];
        mag += std::fabs(static_cast<double>(wd[k]) * x[t * c.cols + k]);
      }
      ref.exact[t * c.rows + r] = static_cast<float>(sum);
      ref.scale = std::max(ref.scale, static_cast<float>(mag));
    }
  }
  return ref;
}

void CheckCase(const Case& c, ThreadPool& pool) {
  SCOPED_TRACE(::testing::Message() << DTypeName(c.type) << " rows=" << c.rows << " cols=" << c.cols
                                    << " m=" << c.m << " threads=" << pool.size());
  const std::vector<uint8_t> w = RandomWeights(c.type, c.rows, c.cols, c.rows * 31 + c.cols);
  const std::vector<float> x = RandomFloats(c.m * c.cols, static_cast<uint32_t>(c.m + c.cols));
  const WeightView view{w.data(), c.type, c.rows, c.cols};
  const Reference ref = ComputeReference(w, x, c);
  const float atol = 2e-6f * ref.scale, rtol = 1e-5f;
  std::vector<float> out(c.m * c.rows, NAN);
  internal::MatMulDot(out.data(), x.data(), view, c.m, pool);
  EXPECT_TRUE(AllClose(out, ref.exact, atol, rtol)) << "MatMulDot";
  std::fill(out.begin(), out.end(), NAN);
  internal::MatMulPanels(out.data(), x.data(), view, c.m, pool);
  EXPECT_TRUE(AllClose(out, ref.exact, atol, rtol)) << "MatMulPanels";
  std::fill(out.begin(), out.end(), NAN);
  MatMul(out.data(), x.data(), view, c.m, pool);
  EXPECT_TRUE(AllClose(out, ref.exact, atol, rtol)) << "MatMul";
}

TEST(MatMulTest, OddSizesAllTypesBothPaths) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (DType type : kAllTypes) {
      const int64_t block = BlockElems(type);
      for (int64_t rows : {1, 3, 7, 19, 37}) {
        for (int64_t cols : block > 1 ? std::vector<int64_t>{block, 3 * block, 7 * block}
                                      : std::vector<int64_t>{1, 3, 7, 19, 733}) {
          for (int64_t m : {1, 2, 3, 5, 7, 19}) CheckCase({type, rows, cols, m}, pool);
        }
      }
    }
  }
}

// Several panels per thread and a row count that splits unevenly; 733 × 37 tokens.
TEST(MatMulTest, ManyPanels) {
  ThreadPool pool(2);
  EXPECT_GT(1000, 2 * internal::MatMulPanelRows(576));
  for (DType type : {DType::kQ4_1, DType::kQ8_0, DType::kF16}) {
    CheckCase({type, 1000, 576, 9}, pool);
    CheckCase({type, 733, 32 * 37, 37}, pool);
  }
}

TEST(MatMulTest, HandComputedF32) {
  ThreadPool pool(2);
  const float w[2 * 3] = {1, 2, 3, -1, 0, 0.5f};  // [2, 3]
  const float x[3 * 3] = {1, 1, 1, 0, 1, 0, 2, 0, -2};
  const float want[3 * 2] = {6, -0.5f, 2, 0, -4, -3};
  for (int64_t m : {1, 3}) {
    float out[6] = {};
    MatMul(out, x, WeightView{w, DType::kF32, 2, 3}, m, pool);
    for (int i = 0; i < 2 * m; ++i) EXPECT_FLOAT_EQ(out[i], want[i]) << i;
  }
}

}  // namespace
}  // namespace glimpse::kernels
