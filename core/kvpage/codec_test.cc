// Codec tests: the scalar conversions against brute force and F16C, every codec's round-trip error
// against the bound its format implies (codec.h), bit-exact section contents against the scalar
// references (which checks the documented layouts and the AVX2 paths), and the size table.
#include "core/kvpage/codec.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "core/kvpage/convert_internal.h"
#include "core/kvpage/page.h"
#include "gtest/gtest.h"

namespace glimpse::kvpage {
namespace {

using internal::FloatBits;

// Keys-like data: N(0, 1) with a few outlier channels (×8) and an occasional large token.
std::vector<float> MakeData(int64_t n, int64_t hd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * hd);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < hd; ++c) {
      x[t * hd + c] = normal(rng) * (c % 7 == 3 ? 8.0f : 1.0f) * (t % 13 == 5 ? 3.0f : 1.0f);
    }
  }
  return x;
}

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

TEST(ConvertTest, HalfMatchesReferenceExhaustively) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ref = internal::HalfToFloatRef(static_cast<uint16_t>(h));
    const float got = internal::HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(FloatBits(ref), FloatBits(got)) << h;
      // Round trip of every non-NaN half, in each rounding direction.
      ASSERT_EQ(internal::FloatToHalfRef(ref), h);
      ASSERT_EQ(internal::FloatToHalfDownRef(ref), h);
      ASSERT_EQ(internal::FloatToHalfUpRef(ref), h);
    }
  }
}

TEST(ConvertTest, FloatToHalfRoundingModesMatchF16c) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits(0, 0x477FE000);  // |x| ≤ 65504
  for (int i = 0; i < 200000; ++i) {
    const float f = internal::BitsFloat(bits(rng) | (i & 1 ? 0x80000000u : 0));
    ASSERT_EQ(internal::FloatToHalfRef(f), internal::FloatToHalf(f)) << f;
    ASSERT_EQ(internal::FloatToHalfDownRef(f), internal::FloatToHalfDown(f)) << f;
    ASSERT_EQ(internal::FloatToHalfUpRef(f), internal::FloatToHalfUp(f)) << f;
    ASSERT_LE(internal::HalfToFloat(internal::FloatToHalfDown(f)), f);
    ASSERT_GE(internal::HalfToFloat(internal::FloatToHalfUp(f)), f);
  }
}

TEST(ConvertTest, E4m3KnownCodes) {
  EXPECT_EQ(internal::E4m3ToFloat(0x00), 0.0f);
  EXPECT_EQ(internal::E4m3ToFloat(0x01), 0.001953125f);  // smallest subnormal 2^−9
  EXPECT_EQ(internal::E4m3ToFloat(0x08), 0.015625f);     // smallest normal 2^−6
  EXPECT_EQ(internal::E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(internal::E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(internal::E4m3ToFloat(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(internal::E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(internal::E4m3ToFloat(0xFF)));
  EXPECT_EQ(internal::FloatToE4m3(1e6f), 0x7E);  // saturates
  EXPECT_EQ(internal::FloatToE4m3(-1e6f), 0xFE);
}

// FloatToE4m3 is the nearest code (ties to the even code) by brute force over all finite codes.
TEST(ConvertTest, E4m3IsNearestEven) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> wide(-460.0f, 460.0f), narrow(-0.05f, 0.05f);
  for (int i = 0; i < 100000; ++i) {
    const float y = i % 2 ? wide(rng) : narrow(rng);
    const float a = std::fmin(std::fabs(y), 448.0f);
    int best = 0;
    float best_err = INFINITY;
    for (int code = 0; code < 0x7F; ++code) {
      const float err = std::fabs(internal::E4m3ToFloat(static_cast<uint8_t>(code)) - a);
      if (err < best_err || (err == best_err && code % 2 == 0)) best = code, best_err = err;
    }
    ASSERT_EQ(internal::FloatToE4m3(y) & 0x7F, best) << y;
  }
}

// Per-element bound of each codec for element i of row t (codec.h).
double Bound(Codec codec, const std::vector<float>& x, int64_t t, int64_t i, int64_t hd) {
  const double v = std::fabs(x[t * hd + i]);
  double absmax = 0;
  for (int64_t c = 0; c < hd; ++c) absmax = std::max(absmax, std::fabs(double(x[t * hd + c])));
  switch (codec) {
    case Codec::kFp16:
      return v * 0x1p-11 + 0x1p-25;
    case Codec::kBf16:
      return v * 0x1p-8;
    case Codec::kFp8E4M3:
      return v * 0x1p-4 + absmax / 448 * 0x1p-10 + v * 0x1p-20;
    case Codec::kInt8:
      return absmax / 127 / 2 + v * 0x1p-20;
    default:
      return 0;  // KIVI: from the stored scale, see KiviBound
  }
}

struct Shape {
  int64_t n, hd;
};
const Shape kShapes[] = {{1, 64},   {3, 64},   {31, 64}, {64, 64}, {1, 128}, {3, 128},
                         {31, 128}, {64, 128}, {5, 1},   {7, 5},   {33, 33}, {40, 100}};

TEST(CodecTest, RegistryIsConsistent) {
  for (const CodecInfo& c : AllCodecs()) {
    EXPECT_EQ(FindCodec(static_cast<uint8_t>(c.id)), &c);
    EXPECT_EQ(FindCodecByName(c.name), &c);
    EXPECT_STREQ(CodecName(c.id), c.name);
  }
  EXPECT_EQ(FindCodec(0), nullptr);
  EXPECT_EQ(FindCodec(99), nullptr);
  EXPECT_EQ(FindCodecByName("int3"), nullptr);
  EXPECT_STREQ(CodecName(static_cast<Codec>(200)), "unknown");
}

// Round trip of the per-token and plain codecs: error bound, and the exact bytes the scalar
// reference produces (so AVX2 and scalar agree, and the layout is the documented one).
TEST(CodecTest, PlainCodecsRoundTripWithinBound) {
  for (Codec codec : {Codec::kFp32, Codec::kFp16, Codec::kBf16, Codec::kFp8E4M3, Codec::kInt8}) {
    const CodecInfo& info = *FindCodec(static_cast<uint8_t>(codec));
    for (const Shape& s : kShapes) {
      for (Role role : {Role::kKeys, Role::kValues}) {
        SCOPED_TRACE(testing::Message() << info.name << " n=" << s.n << " hd=" << s.hd);
        const std::vector<float> x = MakeData(s.n, s.hd, 11 * s.n + s.hd);
        std::vector<uint8_t> buf(info.section_bytes(role, s.n, s.hd, 0));
        ASSERT_TRUE(info.encode(role, x.data(), s.n, s.hd, 0, buf.data()).ok());
        std::vector<float> y(x.size());
        info.decode(role, buf.data(), s.n, s.hd, 0, y.data());
        for (int64_t t = 0; t < s.n; ++t) {
          for (int64_t c = 0; c < s.hd; ++c) {
            const int64_t i = t * s.hd + c;
            ASSERT_LE(std::fabs(double(x[i]) - y[i]), Bound(codec, x, t, c, s.hd))
                << "t=" << t << " c=" << c << " x=" << x[i] << " y=" << y[i];
          }
        }
        // Bit-exact against the scalar reference.
        for (int64_t t = 0; t < s.n; ++t) {
          for (int64_t c = 0; c < s.hd; ++c) {
            const int64_t i = t * s.hd + c;
            if (codec == Codec::kFp32) {
              ASSERT_EQ(LoadF32(&buf[4 * i]), x[i]);
            } else if (codec == Codec::kFp16) {
              ASSERT_EQ(Load16(&buf[2 * i]), internal::FloatToHalfRef(x[i]));
            } else if (codec == Codec::kBf16) {
              ASSERT_EQ(Load16(&buf[2 * i]), internal::FloatToBf16(x[i]));
            } else {
              const float scale = LoadF32(&buf[4 * t]);
              const uint8_t code = buf[4 * s.n + i];
              const float limit = codec == Codec::kInt8 ? 127.0f : 448.0f;
              float absmax = 0;
              for (int64_t k = 0; k < s.hd; ++k) {
                absmax = std::fmax(absmax, std::fabs(x[t * s.hd + k]));
              }
              ASSERT_EQ(scale, absmax / limit);
              const float inv_ref = limit / absmax;
              const uint8_t want =
                  codec == Codec::kInt8
                      ? static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[i] * inv_ref)))
                      : internal::FloatToE4m3(x[i] * inv_ref);
              ASSERT_EQ(code, want) << "t=" << t << " c=" << c;
            }
          }
        }
      }
    }
  }
}

// The vector fp8 decoder (via fp16 bits) gives exactly E4m3ToFloat(code)·scale for all 256 codes,
// NaN codes included.
TEST(CodecTest, Fp8DecodesEveryCode) {
  std::vector<uint8_t> section(4 + 256);
  const float scale = 1.5f;
  std::memcpy(section.data(), &scale, 4);
  for (int code = 0; code < 256; ++code) section[4 + code] = static_cast<uint8_t>(code);
  std::vector<float> y(256);
  FindCodec(static_cast<uint8_t>(Codec::kFp8E4M3))
      ->decode(Role::kKeys, section.data(), 1, 256, 0, y.data());
  for (int code = 0; code < 256; ++code) {
    const float want = internal::E4m3ToFloat(static_cast<uint8_t>(code)) * scale;
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[code])) << code;
    } else {
      EXPECT_EQ(FloatBits(y[code]), FloatBits(want)) << code;
    }
  }
}

// A scalar reader of a KIVI section, written from codec.h's layout alone.
struct KiviSection {
  int bits;
  Role role;
  int64_t n, hd, residual;
  const uint8_t* p;

  int64_t q() const { return n - residual; }
  int64_t gc() const { return (hd + 31) / 32; }
  int64_t params() const { return role == Role::kKeys ? (q() + 31) / 32 * hd : q() * gc(); }
  int64_t ParamIndex(int64_t t, int64_t c) const {
    return role == Role::kKeys ? (t / 32) * hd + c : t * gc() + c / 32;
  }
  float Scale(int64_t t, int64_t c) const {
    return internal::HalfToFloatRef(Load16(p + 2 * ParamIndex(t, c)));
  }
  float Zero(int64_t t, int64_t c) const {
    return internal::HalfToFloatRef(Load16(p + 2 * params() + 2 * ParamIndex(t, c)));
  }
  int Code(int64_t t, int64_t c) const {
    const uint8_t* codes = p + 4 * params() + t * ((hd * bits + 7) / 8);
    return (codes[c * bits / 8] >> (c * bits % 8)) & ((1 << bits) - 1);
  }
  uint16_t Residual(int64_t t, int64_t c) const {
    const uint8_t* res = p + 4 * params() + q() * ((hd * bits + 7) / 8);
    return Load16(res + 2 * ((t - q()) * hd + c));
  }
};

// Min and max of the group that element (t, c) belongs to.
std::pair<float, float> GroupRange(const std::vector<float>& x, Role role, int64_t q, int64_t hd,
                                   int64_t t, int64_t c) {
  float lo = INFINITY, hi = -INFINITY;
  if (role == Role::kKeys) {
    for (int64_t r = t / 32 * 32; r < std::min(q, t / 32 * 32 + 32); ++r) {
      lo = std::fmin(lo, x[r * hd + c]), hi = std::fmax(hi, x[r * hd + c]);
    }
  } else {
    for (int64_t k = c / 32 * 32; k < std::min(hd, c / 32 * 32 + 32); ++k) {
      lo = std::fmin(lo, x[t * hd + k]), hi = std::fmax(hi, x[t * hd + k]);
    }
  }
  return {lo, hi};
}

// KIVI: zero/scale are min rounded down / range rounded up (and not bigger than that), each code is
// round((x − zero)/scale), the error is at most scale/2, residual rows are plain fp16, and decode
// computes code·scale + zero exactly.
TEST(CodecTest, KiviRoundTripWithinBound) {
  for (Codec codec : {Codec::kKivi4, Codec::kKivi2}) {
    const CodecInfo& info = *FindCodec(static_cast<uint8_t>(codec));
    const int bits = codec == Codec::kKivi4 ? 4 : 2;
    for (const Shape& s : kShapes) {
      for (int64_t residual : {int64_t{0}, std::min<int64_t>(s.n, 2), s.n}) {
        for (Role role : {Role::kKeys, Role::kValues}) {
          SCOPED_TRACE(testing::Message() << info.name << " n=" << s.n << " hd=" << s.hd
                                          << " residual=" << residual << " role=" << int(role));
          const std::vector<float> x = MakeData(s.n, s.hd, 5 * s.n + s.hd + residual);
          std::vector<uint8_t> buf(info.section_bytes(role, s.n, s.hd, residual));
          ASSERT_TRUE(info.encode(role, x.data(), s.n, s.hd, residual, buf.data()).ok());
          std::vector<float> y(x.size());
          info.decode(role, buf.data(), s.n, s.hd, residual, y.data());
          const KiviSection sec{bits, role, s.n, s.hd, residual, buf.data()};
          const float levels = (1 << bits) - 1;
          for (int64_t t = 0; t < s.n; ++t) {
            for (int64_t c = 0; c < s.hd; ++c) {
              const float v = x[t * s.hd + c], got = y[t * s.hd + c];
              if (t >= sec.q()) {
                ASSERT_EQ(sec.Residual(t, c), internal::FloatToHalfRef(v));
                ASSERT_EQ(got, internal::HalfToFloatRef(internal::FloatToHalfRef(v)));
                continue;
              }
              const auto [lo, hi] = GroupRange(x, role, sec.q(), s.hd, t, c);
              const float zero = sec.Zero(t, c), scale = sec.Scale(t, c);
              ASSERT_EQ(internal::FloatToHalfRef(zero), internal::FloatToHalfDownRef(lo));
              ASSERT_LE(scale, (hi - zero) / levels * (1 + 0x1p-10) + 0x1p-24);
              ASSERT_GE(zero + levels * scale, hi - std::fabs(hi) * 0x1p-20);
              const int code = sec.Code(t, c);
              const float want = std::nearbyint((v - zero) * (scale > 0 ? 1 / scale : 0));
              ASSERT_EQ(code, std::clamp(want, 0.0f, levels)) << "t=" << t << " c=" << c;
              ASSERT_EQ(got, std::fma(float(code), scale, zero));
              ASSERT_LE(std::fabs(double(v) - got), scale / 2 + std::fabs(v) * 0x1p-20 + 1e-30)
                  << "t=" << t << " c=" << c << " x=" << v << " scale=" << scale;
            }
          }
        }
      }
    }
  }
}

TEST(CodecTest, RejectsValuesTheFormatCannotHold) {
  for (const CodecInfo& info : AllCodecs()) {
    for (float bad : {NAN, INFINITY, -INFINITY, 1e5f}) {
      const bool fits = bad == 1e5f && (info.id == Codec::kBf16 || info.id == Codec::kFp8E4M3 ||
                                        info.id == Codec::kInt8 || info.id == Codec::kFp32);
      for (Role role : {Role::kKeys, Role::kValues}) {
        std::vector<float> x = MakeData(40, 64, 3);
        x[37 * 64 + 45] = bad;
        std::vector<uint8_t> buf(info.section_bytes(role, 40, 64, 0));
        const absl::Status st = info.encode(role, x.data(), 40, 64, 0, buf.data());
        if (fits) {
          EXPECT_TRUE(st.ok()) << info.name << ": " << st;
          continue;
        }
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << info.name << " " << bad;
        EXPECT_NE(st.message().find("row 37 column 45"), std::string::npos) << st;
        EXPECT_NE(st.message().find(info.name), std::string::npos) << st;
      }
    }
  }
}

TEST(CodecTest, ZeroRowsStayZero) {
  for (const CodecInfo& info : AllCodecs()) {
    std::vector<float> x(3 * 64, 0.0f);
    x[64 + 5] = 1e-35f;  // below int8/fp8's 2^−100 threshold: stored as zero
    std::vector<uint8_t> buf(info.section_bytes(Role::kValues, 3, 64, 0));
    ASSERT_TRUE(info.encode(Role::kValues, x.data(), 3, 64, 0, buf.data()).ok());
    std::vector<float> y(x.size(), 1.0f);
    info.decode(Role::kValues, buf.data(), 3, 64, 0, y.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i]), 1e-30f) << info.name << i;
  }
}

// Bytes per kept token for head_dim 64, printed as the markdown table in docs/kv_pages.md.
TEST(CodecTest, BytesPerTokenTable) {
  constexpr int64_t kHd = 64, kN = kDefaultPageTokens;
  std::vector<float> kv(kN * kHd, 0.5f);
  std::vector<int32_t> pos(kN);
  for (int64_t i = 0; i < kN; ++i) pos[i] = static_cast<int32_t>(i);
  const PageView view{0, 0, kN, kHd, kv.data(), kv.data(), pos.data(), {}, {}};
  std::cout << "| codec | K+V bytes/token | page bytes/token (64 tokens) | vs fp16 page "
               "| last page, 32 fp16 rows |\n|---|---:|---:|---:|---:|\n";
  const double fp16_page = double(*EncodedSize(view, Codec::kFp16)) / kN;
  for (const CodecInfo& info : AllCodecs()) {
    const double kv_bytes = double(info.section_bytes(Role::kKeys, kN, kHd, 0) +
                                   info.section_bytes(Role::kValues, kN, kHd, 0)) /
                            kN;
    const double page = double(*EncodedSize(view, info.id)) / kN;
    std::cout << "| " << info.name << " | " << kv_bytes << " | " << page << " | "
              << fp16_page / page << "× | ";
    if (info.supports_residual) {
      std::cout << double(*EncodedSize(view, info.id, {.residual_rows = 32})) / kN;
    } else {
      std::cout << "–";
    }
    std::cout << " |\n";
  }
  EXPECT_EQ(FindCodec(1)->section_bytes(Role::kKeys, kN, kHd, 0), size_t{2 * kN * kHd});
  // KIVI-4 keys: 2 groups × 64 channels × (scale + zero) fp16 + 64 rows × 32 code bytes.
  EXPECT_EQ(FindCodec(5)->section_bytes(Role::kKeys, kN, kHd, 0), size_t{2 * 64 * 4 + 64 * 32});
  // KIVI-2 values: 64 rows × 2 groups × 4 bytes + 64 rows × 16 code bytes.
  EXPECT_EQ(FindCodec(6)->section_bytes(Role::kValues, kN, kHd, 0), size_t{64 * 2 * 4 + 64 * 16});
  EXPECT_EQ(*EncodedSize(view, Codec::kFp16), size_t{64 + 4 * kHd + 4 * kN + 4 * kN * kHd});
}

}  // namespace
}  // namespace glimpse::kvpage
