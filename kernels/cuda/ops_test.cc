#include "kernels/cuda/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/test_util.h"
#include "kernels/ops.h"

namespace glimpse::kernels::cuda {
namespace {

using kernels::testing::AllClose;
using kernels::testing::OddSizes;
using kernels::testing::RandomFloats;

// Tolerances: the device's expf, rsqrtf and sincosf are within a few ulp of glibc's.
constexpr float kAtol = 1e-5f, kRtol = 1e-5f;

class CudaOpsTest : public testing::DeviceTest {};

TEST_F(CudaOpsTest, RmsNormEqualsTheCpuOnOddSizes) {
  for (const int64_t dim : OddSizes()) {
    const int64_t rows = 5;
    const std::vector<float> x = RandomFloats(rows * dim, 1, -3, 3), w = RandomFloats(dim, 2);
    std::vector<float> ref(x.size());
    kernels::RmsNorm(ref.data(), x.data(), w.data(), 1e-5f, rows, dim);
    DeviceBuffer<float> dx(x), dw(w), out(rows * dim);
    ASSERT_EQ(RmsNorm(out.data(), dx.data(), dw.data(), 1e-5f, rows, dim, nullptr), cudaSuccess);
    EXPECT_TRUE(AllClose(out.ToHost().data(), ref.data(), rows * dim, kAtol, 1e-4f)) << dim;
  }
}

TEST_F(CudaOpsTest, RopeEqualsTheCpuInBothStyles) {
  const int64_t tokens = 7, heads = 3;
  for (const int64_t head_dim : {64, 128}) {
    for (const RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      std::vector<float> x = RandomFloats(tokens * heads * head_dim, 3);
      std::vector<float> inv_freq(head_dim / 2);
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / head_dim);
      }
      const std::vector<int32_t> pos = {0, 1, 17, 255, 1024, 4097, 32000};
      DeviceBuffer<float> dx(x), df(inv_freq);
      DeviceBuffer<int32_t> dp(pos);
      ASSERT_EQ(Rope(dx.data(), dp.data(), df.data(), style, tokens, heads, head_dim, nullptr),
                cudaSuccess);
      kernels::Rope(x.data(), pos.data(), inv_freq.data(), style, tokens, heads, head_dim);
      EXPECT_TRUE(AllClose(dx.ToHost().data(), x.data(), x.size(), 1e-4f, 1e-4f));
    }
  }
}

TEST_F(CudaOpsTest, ElementwiseOpsEqualTheCpu) {
  for (const int64_t n : OddSizes()) {
    const std::vector<float> a = RandomFloats(n * 3, 4, -6, 6), b = RandomFloats(n * 3, 5);
    const std::vector<float> bias = RandomFloats(n, 6);
    DeviceBuffer<float> da(a), db(b), dbias(bias), out(n * 3);

    std::vector<float> ref(a.size());
    kernels::SiluMul(ref.data(), a.data(), b.data(), n * 3);
    ASSERT_EQ(SiluMul(out.data(), da.data(), db.data(), n * 3, nullptr), cudaSuccess);
    EXPECT_TRUE(AllClose(out.ToHost().data(), ref.data(), n * 3, kAtol, kRtol)) << "silu " << n;

    ref = a;
    kernels::AddBias(ref.data(), bias.data(), 3, n);
    ASSERT_EQ(AddBias(da.data(), dbias.data(), 3, n, nullptr), cudaSuccess);
    EXPECT_EQ(da.ToHost(), ref) << "bias " << n;

    kernels::Add(ref.data(), b.data(), n * 3);
    ASSERT_EQ(Add(da.data(), db.data(), n * 3, nullptr), cudaSuccess);
    EXPECT_EQ(da.ToHost(), ref) << "add " << n;

    kernels::SoftmaxRows(ref.data(), 3, n);
    ASSERT_EQ(SoftmaxRows(da.data(), 3, n, nullptr), cudaSuccess);
    EXPECT_TRUE(AllClose(da.ToHost().data(), ref.data(), n * 3, 1e-6f, kRtol)) << "softmax " << n;
  }
}

TEST_F(CudaOpsTest, ArgmaxPicksTheFirstLargestLikeAGreedySampler) {
  const int64_t rows = 4, n = 49152;
  std::vector<float> x = RandomFloats(rows * n, 7, -10, 10);
  x[1 * n + 30000] = 50.0f;  // row 1: one clear winner
  x[2 * n + 7] = 60.0f;      // row 2: a tie, the first wins
  x[2 * n + 40000] = 60.0f;
  x[3 * n + n - 1] = 70.0f;  // row 3: the last element
  DeviceBuffer<float> dx(x);
  DeviceBuffer<int32_t> out(rows);
  ASSERT_EQ(ArgmaxRows(out.data(), dx.data(), rows, n, nullptr), cudaSuccess);
  const std::vector<int32_t> got = out.ToHost();
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = x.data() + r * n;
    EXPECT_EQ(got[r], std::max_element(row, row + n) - row) << r;
  }
}

TEST_F(CudaOpsTest, EmbedRowsGathersAndZeroesUnknownIds) {
  const int64_t vocab = 37, dim = 19;
  const std::vector<float> table = testing::RoundedToHalf(RandomFloats(vocab * dim, 8));
  const std::vector<int32_t> ids = {3, 0, 36, -1, 37, 3};
  DeviceBuffer<uint16_t> dt(testing::HalfBits(table));
  DeviceBuffer<int32_t> di(ids);
  DeviceBuffer<float> out(ids.size() * dim);
  ASSERT_EQ(EmbedRows(out.data(), dt.data(), di.data(), ids.size(), vocab, dim, nullptr),
            cudaSuccess);
  const std::vector<float> got = out.ToHost();
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      const bool valid = ids[t] >= 0 && ids[t] < vocab;
      EXPECT_EQ(got[t * dim + i], valid ? table[ids[t] * dim + i] : 0.0f) << t << "," << i;
    }
  }
}

}  // namespace
}  // namespace glimpse::kernels::cuda
