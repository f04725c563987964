// Internal to core/kvpage: scalar number conversions shared by the codecs (and the reference each
// AVX2 path is tested against). The scalar and vector paths use the same arithmetic in the same
// order, so they agree bit for bit; codec_test.cc checks that.
//
// GLIMPSE_KVPAGE_AVX2 is defined where the compiler targets AVX2, FMA and F16C.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GLIMPSE_KVPAGE_AVX2 1
#include <immintrin.h>
#endif

namespace glimpse::kvpage::internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline constexpr float kHalfMax = 65504.0f;
inline constexpr float kBf16Max = 3.38953139e38f;  // 0x7F7F0000
inline constexpr float kE4m3Max = 448.0f;

// IEEE fp16 → fp32, exact; NaN stays NaN (made quiet, as vcvtph2ps does).
inline float HalfToFloatRef(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000 | (man << 13) | (man ? 0x400000 : 0));
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (man << 13));
  const float v = static_cast<float>(man) * 5.9604644775390625e-8f;  // man · 2^−24, exact
  return sign ? -v : v;
}

// fp32 → fp16, round to nearest even; beyond 65519.99 gives inf.
inline uint16_t FloatToHalfRef(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFF;
  if (ax >= 0x7F800000) {
    return sign | 0x7C00 | (ax > 0x7F800000 ? 0x200 | ((ax >> 13) & 0x3FF) : 0);
  }
  if (ax >= 0x477FF000) return sign | 0x7C00;  // ≥ 65520 rounds to inf
  if (ax < 0x38800000) {                       // below 2^−14: subnormal, h = round(|f|·2^24)
    return sign | static_cast<uint16_t>(std::nearbyint(BitsFloat(ax) * 16777216.0f));
  }
  const uint32_t r = ax + 0xFFF + ((ax >> 13) & 1) - (112u << 23);
  return sign | static_cast<uint16_t>(r >> 13);
}

inline float HalfToFloat(uint16_t h) {
#ifdef GLIMPSE_KVPAGE_AVX2
  return _cvtsh_ss(h);
#else
  return HalfToFloatRef(h);
#endif
}

inline uint16_t FloatToHalf(float f) {
#ifdef GLIMPSE_KVPAGE_AVX2
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  return FloatToHalfRef(f);
#endif
}

// Directed rounding for finite |f| ≤ 65504: the largest half ≤ f, the smallest half ≥ f.
inline uint16_t FloatToHalfDownRef(float f) {
  uint16_t h = FloatToHalfRef(f);
  if (HalfToFloatRef(h) > f) h = (h == 0) ? 0x8001 : (h & 0x8000) ? h + 1 : h - 1;
  return h;
}
inline uint16_t FloatToHalfUpRef(float f) {
  uint16_t h = FloatToHalfRef(f);
  if (HalfToFloatRef(h) < f) h = (h == 0x8000) ? 0x0001 : (h & 0x8000) ? h - 1 : h + 1;
  return h;
}
inline uint16_t FloatToHalfDown(float f) {
#ifdef GLIMPSE_KVPAGE_AVX2
  return _cvtss_sh(f, _MM_FROUND_TO_NEG_INF);
#else
  return FloatToHalfDownRef(f);
#endif
}
inline uint16_t FloatToHalfUp(float f) {
#ifdef GLIMPSE_KVPAGE_AVX2
  return _cvtss_sh(f, _MM_FROUND_TO_POS_INF);
#else
  return FloatToHalfUpRef(f);
#endif
}

// bf16: the upper 16 bits of fp32, round to nearest even (finite inputs).
inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// OCP FP8 E4M3FN for finite y: saturates to ±448, round to nearest even. Normals round the fp32
// mantissa to 3 bits and rebias the exponent (127 → 7: code = (bits >> 20) − 120·8); below the
// smallest normal 2^−6 the code is round(|y|·2^9) (subnormals m·2^−9; 8 is 2^−6 itself).
inline uint8_t FloatToE4m3(float y) {
  const uint8_t sign = static_cast<uint8_t>((FloatBits(y) >> 24) & 0x80);
  const float a = std::fmin(std::fabs(y), kE4m3Max);
  if (a < 0.015625f) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  uint32_t u = FloatBits(a);
  u += 0x7FFFF + ((u >> 20) & 1);
  return sign | static_cast<uint8_t>((u >> 20) - 960);
}
// Exact value of an E4M3FN code; 0x7F and 0xFF are NaN.
inline float E4m3ToFloat(uint8_t code) {
  const uint32_t em = code & 0x7F;
  float v;
  if (em == 0x7F) {
    v = std::nanf("");
  } else if ((em >> 3) == 0) {
    v = static_cast<float>(em) * 0.001953125f;  // m · 2^−9
  } else {
    v = std::ldexp(1.0f + static_cast<float>(em & 7) / 8.0f, static_cast<int>(em >> 3) - 7);
  }
  return (code & 0x80) ? -v : v;
}

#ifdef GLIMPSE_KVPAGE_AVX2
// 32 int32 lanes → 32 bytes in lane order (`packs` works per 128-bit half, so the dwords come out
// as c0lo c1lo c2lo c3lo c0hi c1hi c2hi c3hi; the permute fixes that).
inline __m256i PackBytes(__m256i c0, __m256i c1, __m256i c2, __m256i c3, bool is_signed) {
  const __m256i p01 = _mm256_packs_epi32(c0, c1), p23 = _mm256_packs_epi32(c2, c3);
  const __m256i b = is_signed ? _mm256_packs_epi16(p01, p23) : _mm256_packus_epi16(p01, p23);
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

}  // namespace glimpse::kvpage::internal
