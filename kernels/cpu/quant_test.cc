#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
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

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kQ4_0, DType::kQ4_1, DType::kQ8_0,
                               DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kBF16};

// A row length of `size` blocks (plain types: elements).
int64_t Elems(DType type, int64_t size) { return BlockElems(type) * size; }

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
      case DType::kQ4_K:  // d, dmin
      case DType::kQ5_K:
        std::memcpy(p, h, 4);
        break;
      case DType::kQ6_K:  // d is last
        std::memcpy(p + BlockBytes(type) - 2, h, 2);
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
  EXPECT_FALSE(IsSupportedDType(15));  // Q8_K (activations only)
  EXPECT_TRUE(IsSupportedDType(12));   // Q4_K
  EXPECT_EQ(BlockBytes(DType::kQ4_K), 144);
  EXPECT_EQ(BlockBytes(DType::kQ5_K), 176);
  EXPECT_EQ(BlockBytes(DType::kQ6_K), 210);
  EXPECT_EQ(BlockElems(DType::kQ6_K), 256);
  EXPECT_EQ(RowBytes(DType::kQ6_K, 2048), 8 * 210);
  EXPECT_STREQ(DTypeName(DType::kQ5_K), "Q5_K");
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

// K-quant rows decode to what gguf-py (GGML's Python package) decodes them to
// (tests/fixtures/kquants/, tools/oracle/make_kquant_fixture.py), on every path.
TEST(QuantTest, KQuantsDecodeAsGgufPyDoes) {
  std::ifstream in(std::string(GLIMPSE_SOURCE_DIR) + "/tests/fixtures/kquants/kquants.txt");
  ASSERT_TRUE(in.good()) << "missing tests/fixtures/kquants/kquants.txt";
  std::string line;
  int types = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream head(line);
    std::string name;
    int64_t rows = 0, n = 0;
    head >> name >> rows >> n;
    const DType type = name == "Q4_K" ? DType::kQ4_K : name == "Q5_K" ? DType::kQ5_K : DType::kQ6_K;
    ASSERT_STREQ(DTypeName(type), name.c_str());
    std::string hex, values;
    ASSERT_TRUE(std::getline(in, hex) && std::getline(in, values)) << name;
    ASSERT_EQ(static_cast<int64_t>(hex.size()), 2 * rows * RowBytes(type, n)) << name;
    std::vector<uint8_t> bytes(hex.size() / 2);
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    }
    std::vector<float> want;
    std::istringstream vs(values);
    for (float v; vs >> v;) want.push_back(v);
    ASSERT_EQ(static_cast<int64_t>(want.size()), rows * n) << name;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> got(n), ref(n);
      DequantizeRow(got.data(), bytes.data() + r * RowBytes(type, n), type, n);
      internal::DequantizeRowRef(ref.data(), bytes.data() + r * RowBytes(type, n), type, n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(ref[i], want[r * n + i]) << name << " row " << r << " element " << i;
        ASSERT_EQ(got[i], ref[i]) << name << " row " << r << " element " << i;
      }
    }
    ++types;
  }
  EXPECT_EQ(types, 3);
}

TEST(QuantTest, DequantizeFastMatchesReference) {
  for (DType type : kAllTypes) {
    for (int64_t size : OddSizes()) {
      const int64_t n = Elems(type, size);
      const std::vector<uint8_t> row = RandomRow(type, n, static_cast<uint32_t>(n));
      std::vector<float> got(n), ref(n);
      DequantizeRow(got.data(), row.data(), type, n);
      internal::DequantizeRowRef(ref.data(), row.data(), type, n);
      EXPECT_TRUE(AllClose(got, ref, 0.0f, 1e-6f)) << DTypeName(type) << " n=" << n;
    }
  }
}

TEST(QuantTest, DotRowHandEncodedBlocks) {
  BlockQ4_1 q41{0x3800, 0xbc00, {}};  // elements 0.5·nib − 1
  BlockQ4_0 q40{0x4000, {}};          // elements 2·(nib − 8)
  BlockQ8_0 q80{0x3400, {}};          // elements 0.25·q
  for (int j = 0; j < 16; ++j) {
    q41.qs[j] = q40.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  for (int j = 0; j < 32; ++j) q80.qs[j] = static_cast<int8_t>(j - 16);
  float ones[32], alternating[32];
  for (int j = 0; j < 32; ++j) {
    ones[j] = 1.0f;
    alternating[j] = j % 2 ? -2.0f : 2.0f;
  }
  float got;
  for (bool fast : {true, false}) {
    auto dot = [&](const void* w, DType type, const float* x) {
      if (fast) return DotRow(w, type, x, 32);
      internal::DotRowsRef(&got, w, 0, 1, type, x, 32);
      return got;
    };
    // With x = 1 the dot is the sum of the weights.
    EXPECT_EQ(dot(&q41, DType::kQ4_1, ones), 88.0f) << fast;
    EXPECT_EQ(dot(&q40, DType::kQ4_0, ones), -32.0f) << fast;
    EXPECT_EQ(dot(&q80, DType::kQ8_0, ones), -4.0f) << fast;
    // Σ_j 2·(−1)^j·w_j: offsets cancel; nib pairs (2i, 2i+1) differ by 1 (low half) and −1 (high
    // half), so the 4-bit sums are 0. Q8_0 pairs differ by 0.25: 16 pairs · 2 · (−0.25) = −8.
    EXPECT_EQ(dot(&q41, DType::kQ4_1, alternating), 0.0f) << fast;
    EXPECT_EQ(dot(&q40, DType::kQ4_0, alternating), 0.0f) << fast;
    EXPECT_EQ(dot(&q80, DType::kQ8_0, alternating), -8.0f) << fast;
  }
}

// Every DotRows path equals the double-precision dot of the dequantised row with x up to fp32
// summation order: |got − ref| ≤ 1e-5·Σ|w_i·x_i| + 1e-6. Row counts cover full 4-row passes and
// every remainder; the stride leaves a gap between rows.
TEST(QuantTest, DotRowsMatchDequantisedDot) {
  using Fn = void (*)(float*, const void*, int64_t, int64_t, DType, const float*, int64_t);
  std::vector<std::pair<const char*, Fn>> paths = {{"public", DotRows},
                                                   {"reference", internal::DotRowsRef}};
#ifdef GLIMPSE_KERNELS_AVX2
  paths.push_back({"avx2", internal::DotRowsAvx2});
#endif
#ifdef GLIMPSE_KERNELS_AVX512
  if (internal::UseAvx512()) paths.push_back({"avx512", internal::DotRowsAvx512});
#endif
  std::vector<int64_t> sizes = OddSizes();
  for (int64_t s : {2, 18, 48}) sizes.push_back(s);  // 64, 576, 1536 elements of 32-blocks
  constexpr int64_t kRows = 7;
  for (DType type : kAllTypes) {
    for (int64_t size : sizes) {
      const int64_t n = Elems(type, size);
      const int64_t stride = RowBytes(type, n) + BlockBytes(type);
      const std::vector<uint8_t> w =
          RandomRow(type, n * kRows + BlockElems(type) * kRows, static_cast<uint32_t>(3 * n + 1));
      const std::vector<float> x = RandomFloats(n, static_cast<uint32_t>(n));
      double ref[kRows], magnitude[kRows];
      std::vector<float> wd(n);
      for (int64_t r = 0; r < kRows; ++r) {
        internal::DequantizeRowRef(wd.data(), w.data() + r * stride, type, n);
        ref[r] = magnitude[r] = 0;
        for (int64_t i = 0; i < n; ++i) {
          ref[r] += static_cast<double>(wd[i]) * x[i];
          magnitude[r] += std::fabs(static_cast<double>(wd[i]) * x[i]);
        }
      }
      for (const auto& [name, fn] : paths) {
        for (int64_t rows = 1; rows <= kRows; ++rows) {
          float got[kRows];
          fn(got, w.data(), stride, rows, type, x.data(), n);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_LE(std::fabs(got[r] - ref[r]), 1e-5 * magnitude[r] + 1e-6)
                << name << " " << DTypeName(type) << " n=" << n << " rows=" << rows << " r=" << r;
          }
        }
      }
      const float one = DotRow(w.data(), type, x.data(), n);
      EXPECT_LE(std::fabs(one - ref[0]), 1e-5 * magnitude[0] + 1e-6) << DTypeName(type);
    }
  }
}

// DotRowsTokens gives each token exactly what DotRows gives it alone (a decode step's rows do not
// depend on each other), for token counts around its 4- (AVX2) and 8-token (AVX-512) blocks and
// every type, on the public entry points and on each fast path that runs here.
TEST(QuantTest, DotRowsTokensEqualsDotRowsPerTokenBitForBit) {
  using Rows = void (*)(float*, const void*, int64_t, int64_t, DType, const float*, int64_t);
  using Tokens = void (*)(float*, int64_t, const void*, int64_t, int64_t, DType, const float*,
                          int64_t, int64_t);
  struct Path {
    const char* name;
    Rows rows;
    Tokens tokens;
  };
  std::vector<Path> paths = {{"public", DotRows, DotRowsTokens}};
#ifdef GLIMPSE_KERNELS_AVX2
  paths.push_back({"avx2", internal::DotRowsAvx2, internal::DotRowsTokensAvx2});
#endif
#ifdef GLIMPSE_KERNELS_AVX512
  if (internal::UseAvx512()) {
    paths.push_back({"avx512", internal::DotRowsAvx512, internal::DotRowsTokensAvx512});
  }
#endif
  constexpr int64_t kRows = 5;
  constexpr int64_t kMaxTokens = 17;
  for (const Path& path : paths) {
    for (DType type : kAllTypes) {
      const int64_t n = BlockElems(type) == 1 ? 72 : BlockElems(type) == 32 ? 32 * 18 : 256 * 3;
      const int64_t stride = RowBytes(type, n) + BlockBytes(type);
      const std::vector<uint8_t> w = RandomRow(type, n * kRows + BlockElems(type) * kRows, 7);
      const std::vector<float> x = RandomFloats(n * kMaxTokens, 11);
      for (int64_t m = 1; m <= kMaxTokens; ++m) {
        std::vector<float> got(m * (kRows + 1), -1.0f);
        path.tokens(got.data(), kRows + 1, w.data(), stride, kRows, type, x.data(), m, n);
        for (int64_t t = 0; t < m; ++t) {
          float want[kRows];
          path.rows(want, w.data(), stride, kRows, type, x.data() + t * n, n);
          for (int64_t r = 0; r < kRows; ++r) {
            ASSERT_EQ(got[t * (kRows + 1) + r], want[r])
                << path.name << " " << DTypeName(type) << " m=" << m << " t=" << t << " r=" << r;
          }
          EXPECT_EQ(got[t * (kRows + 1) + kRows], -1.0f) << "wrote past its rows";
        }
      }
    }
  }
}

}  // namespace
}  // namespace glimpse::kernels
