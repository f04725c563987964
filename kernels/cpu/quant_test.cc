#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/quant_internal.h"
#include "kernels/cpu/test_util.h"

#ifdef GLIMPSE_KERNELS_AVX2
#include <immintrin.h>
#endif

namespace glimpse::kernels {
namespace {

using internal::BlockQ4_0;
using internal::BlockQ4_1;
using internal::BlockQ8_0;
using testing::AllClose;
using testing::OddSizes;
using testing::RandomFloats;

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kQ4_0,
                               DType::kQ4_1, DType::kQ8_0, DType::kBF16};

float Bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// A row of `n` elements of `type` with random scales and quants (random bits for plain types,
// kept finite).
std::vector<uint8_t> RandomRow(DType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> row(RowBytes(type, n));
  for (uint8_t& b : row) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.1f), shift(-0.5f, 0.5f), val(-2.f, 2.f);
  const int64_t nb = n / BlockElems(type);
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* p = row.data() + i * BlockBytes(type);
    uint16_t h[2] = {Fp32ToFp16(scale(rng)), Fp32ToFp16(shift(rng))};
    float f = val(rng);
    switch (type) {
      case DType::kQ4_1:
        std::memcpy(p, h, 4);
        break;
      case DType::kQ4_0:
      case DType::kQ8_0:
        std::memcpy(p, h, 2);
        break;
      case DType::kF32:
        std::memcpy(p, &f, 4);
        break;
      case DType::kF16:
        h[0] = Fp32ToFp16(f);
        std::memcpy(p, h, 2);
        break;
      case DType::kBF16:
        h[0] = static_cast<uint16_t>(Bits(f) >> 16);
        std::memcpy(p, h, 2);
        break;
    }
  }
  return row;
}

TEST(QuantTest, SizesAndNames) {
  EXPECT_TRUE(IsSupportedDType(0));
  EXPECT_TRUE(IsSupportedDType(30));
  EXPECT_FALSE(IsSupportedDType(6));   // Q5_0
  EXPECT_FALSE(IsSupportedDType(12));  // Q4_K
  EXPECT_EQ(BlockBytes(DType::kQ8_0), 34);
  EXPECT_EQ(BlockBytes(DType::kQ4_0), 18);
  EXPECT_EQ(BlockBytes(DType::kQ4_1), 20);
  EXPECT_EQ(BlockElems(DType::kQ4_1), 32);
  EXPECT_EQ(BlockElems(DType::kBF16), 1);
  EXPECT_EQ(RowBytes(DType::kQ4_1, 576), 18 * 20);
  EXPECT_EQ(RowBytes(DType::kF16, 7), 14);
  EXPECT_EQ(RowBytes(DType::kF32, 3), 12);
  EXPECT_STREQ(DTypeName(DType::kQ4_1), "Q4_1");
  EXPECT_STREQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(ActivationType(DType::kQ4_1), DType::kQ8_0);
  EXPECT_EQ(ActivationType(DType::kF16), DType::kF32);
}

TEST(QuantTest, Fp16KnownValues) {
  struct Case {
    uint16_t h;
    float f;
  };
  const Case cases[] = {
      {0x0000, 0.0f},
      {0x3c00, 1.0f},
      {0xc000, -2.0f},
      {0x7bff, 65504.0f},
      {0x0400, 0x1p-14f},
      {0x0001, 0x1p-24f},
      {0x03ff, 1023 * 0x1p-24f},
      {0x8001, -0x1p-24f},
      {0x3555, 0.333251953125f},
      {0x7c00, std::numeric_limits<float>::infinity()},
      {0xfc00, -std::numeric_limits<float>::infinity()},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Fp16ToFp32(c.h), c.f) << std::hex << c.h;
    EXPECT_EQ(internal::Fp16ToFp32Ref(c.h), c.f) << std::hex << c.h;
    EXPECT_EQ(Fp32ToFp16(c.f), c.h) << c.f;
    EXPECT_EQ(internal::Fp32ToFp16Ref(c.f), c.h) << c.f;
  }
  EXPECT_EQ(Bits(Fp16ToFp32(0x8000)), 0x80000000u);  // −0
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7e00)));
  EXPECT_TRUE(std::isnan(internal::Fp16ToFp32Ref(0x7c01)));
  EXPECT_EQ(Fp32ToFp16(std::nanf("")) & 0x7e00, 0x7e00);
  EXPECT_EQ(internal::Fp32ToFp16Ref(std::nanf("")) & 0x7e00, 0x7e00);
  // Rounding: ties to even, overflow to inf, underflow to (signed) zero.
  for (auto f : {Fp32ToFp16, internal::Fp32ToFp16Ref}) {
    EXPECT_EQ(f(65519.0f), 0x7bff);
    EXPECT_EQ(f(65520.0f), 0x7c00);
    EXPECT_EQ(f(1e10f), 0x7c00);
    EXPECT_EQ(f(1.0f + 0x1p-11f), 0x3c00);
    EXPECT_EQ(f(1.0f + 3 * 0x1p-11f), 0x3c02);
    EXPECT_EQ(f(0x1p-25f), 0x0000);
    EXPECT_EQ(f(0x1.000002p-25f), 0x0001);
    EXPECT_EQ(f(3 * 0x1p-25f), 0x0002);
    EXPECT_EQ(f(-1e-10f), 0x8000);
    EXPECT_EQ(f(0x1.ffcp-15f), 0x0400);  // largest subnormal + ½ ulp carries into the normals
  }
  EXPECT_EQ(Bf16ToFp32(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFp32(0xc0a0), -5.0f);
  EXPECT_TRUE(std::isinf(Bf16ToFp32(0x7f80)));
}

TEST(QuantTest, Fp16ReferenceMatchesHardwareExhaustively) {
#ifdef GLIMPSE_KERNELS_AVX2
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(Bits(internal::Fp16ToFp32Ref(h)), Bits(_cvtsh_ss(h))) << std::hex << h;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t b = i < 65536 ? (static_cast<uint32_t>(i) << 16) | (rng() & 0xffff) : rng();
    ASSERT_EQ(internal::Fp32ToFp16Ref(Bits(b)), _cvtss_sh(Bits(b), _MM_FROUND_TO_NEAREST_INT))
        << std::hex << b;
  }
#else
  GTEST_SKIP() << "no F16C";
#endif
}

TEST(QuantTest, DequantizeHandEncodedBlocks) {
  BlockQ4_1 q41{0x3800, 0xbc00, {}};  // d = 0.5, m = −1
  BlockQ4_0 q40{0x4000, {}};          // d = 2
  BlockQ8_0 q80{0x3400, {}};          // d = 0.25
  for (int j = 0; j < 16; ++j) {
    q41.qs[j] = q40.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  for (int j = 0; j < 32; ++j) q80.qs[j] = static_cast<int8_t>(j - 16);
  float out[32];
  for (auto dequant : {DequantizeRow, internal::DequantizeRowRef}) {
    dequant(out, &q41, DType::kQ4_1, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(out[j], 0.5f * j - 1.0f) << j;
      EXPECT_EQ(out[16 + j], 0.5f * (15 - j) - 1.0f) << j;
    }
    dequant(out, &q40, DType::kQ4_0, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(out[j], 2.0f * (j - 8)) << j;
      EXPECT_EQ(out[16 + j], 2.0f * (7 - j)) << j;
    }
    dequant(out, &q80, DType::kQ8_0, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.25f * (j - 16)) << j;
  }
}

TEST(QuantTest, DequantizeFastMatchesReference) {
  for (DType type : kAllTypes) {
    for (int64_t size : OddSizes()) {
      const int64_t n = BlockElems(type) == 1 ? size : 32 * size;
      const std::vector<uint8_t> row = RandomRow(type, n, static_cast<uint32_t>(n));
      std::vector<float> got(n), ref(n);
      DequantizeRow(got.data(), row.data(), type, n);
      internal::DequantizeRowRef(ref.data(), row.data(), type, n);
      EXPECT_TRUE(AllClose(got, ref, 0.0f, 1e-6f)) << DTypeName(type) << " n=" << n;
    }
  }
}

TEST(QuantTest, QuantizeQ8_0RoundsHalfAwayFromZero) {
  float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -126.5f};
  BlockQ8_0 fast, ref;
  QuantizeRowQ8_0(&fast, x, 32);
  internal::QuantizeRowQ8_0Ref(&ref, x, 32);
  const int8_t want[7] = {127, 3, -3, 1, -1, 1, -127};
  EXPECT_EQ(fast.d, 0x3c00);  // d = 127 / 127
  for (int j = 0; j < 7; ++j) EXPECT_EQ(fast.qs[j], want[j]) << j;
  for (int j = 7; j < 32; ++j) EXPECT_EQ(fast.qs[j], 0) << j;
  EXPECT_EQ(std::memcmp(&fast, &ref, sizeof(fast)), 0);
  const float zeros[32] = {};
  QuantizeRowQ8_0(&fast, zeros, 32);
  EXPECT_EQ(fast.d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(fast.qs[j], 0);
}

TEST(QuantTest, QuantizeQ8_0FastIsBitIdenticalToReference) {
  for (int64_t size : OddSizes()) {
    const int64_t n = 32 * size;
    std::vector<float> x = RandomFloats(n, static_cast<uint32_t>(size), -3.0f, 3.0f);
    // Exact ties after scaling: a block whose amax is 127 has d = 1 and x·id = x.
    for (int j = 0; j < 32; ++j) x[j] = j == 0 ? 127.0f : (j - 16) + 0.5f;
    std::vector<uint8_t> fast(RowBytes(DType::kQ8_0, n)), ref(fast.size());
    QuantizeRowQ8_0(fast.data(), x.data(), n);
    internal::QuantizeRowQ8_0Ref(ref.data(), x.data(), n);
    EXPECT_EQ(fast, ref) << "n=" << n;
    // Round trip error ≤ d/2 per element plus the fp16 rounding of d (127·d·2⁻¹¹).
    std::vector<float> back(n);
    DequantizeRow(back.data(), fast.data(), DType::kQ8_0, n);
    for (int64_t b = 1; b < size; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      for (int j = 0; j < 32; ++j) {
        ASSERT_NEAR(back[b * 32 + j], x[b * 32 + j], amax / 127 * 0.57f);
      }
    }
  }
}

TEST(QuantTest, DotRowHandEncodedQ4_1) {
  BlockQ4_1 w{0x3800, 0xbc00, {}};  // elements 0.5·nib − 1
  for (int j = 0; j < 16; ++j) w.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  BlockQ8_0 x{0x3c00, {}};  // d = 1, q = 1: the dot is the sum of the weights
  for (int j = 0; j < 32; ++j) x.qs[j] = 1;
  EXPECT_EQ(DotRow(&w, DType::kQ4_1, &x, 32), 88.0f);
  EXPECT_EQ(internal::DotRowRef(&w, DType::kQ4_1, &x, 32), 88.0f);
  for (int j = 0; j < 32; ++j) x.qs[j] = static_cast<int8_t>(j % 2 ? -2 : 2);
  // Σ_j 2·(−1)^j·(0.5·nib_j − 1): the m terms cancel; nib pairs (2i, 2i+1) differ by 1 (low
  // half) and −1 (high half), so the sum is 2·0.5·(−8 + 8) = 0.
  EXPECT_EQ(DotRow(&w, DType::kQ4_1, &x, 32), 0.0f);
}

// The dot of a row with an activation equals the fp32 dot of both dequantised rows, and the fast
// path equals the reference.
TEST(QuantTest, DotRowFastMatchesReferenceAndDequantisedDot) {
  for (DType type : kAllTypes) {
    for (int64_t size : OddSizes()) {
      const int64_t n = BlockElems(type) == 1 ? size : 32 * size;
      const std::vector<uint8_t> w = RandomRow(type, n, static_cast<uint32_t>(3 * n + 1));
      const std::vector<float> xf = RandomFloats(n, static_cast<uint32_t>(n));
      std::vector<uint8_t> xq(RowBytes(DType::kQ8_0, n));
      const void* x = xf.data();
      if (ActivationType(type) == DType::kQ8_0) {
        QuantizeRowQ8_0(xq.data(), xf.data(), n);
        x = xq.data();
      }
      std::vector<float> wd(n), xd(n);
      internal::DequantizeRowRef(wd.data(), w.data(), type, n);
      internal::DequantizeRowRef(xd.data(), x, ActivationType(type), n);
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(wd[i]) * xd[i];
        magnitude += std::fabs(static_cast<double>(wd[i]) * xd[i]);
      }
      const float got = DotRow(w.data(), type, x, n);
      const float ref = internal::DotRowRef(w.data(), type, x, n);
      const float want = static_cast<float>(exact);
      const float atol = 1e-6f * static_cast<float>(magnitude) + 1e-30f;
      EXPECT_TRUE(AllClose(&got, &ref, 1, atol, 1e-6f)) << DTypeName(type) << " n=" << n;
      EXPECT_TRUE(AllClose(&ref, &want, 1, atol, 1e-6f)) << DTypeName(type) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace glimpse::kernels
