// Floating-point codecs: fp16, bf16 and OCP FP8 E4M3FN with a per-token scale (codec.h).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/kvpage/codec_internal.h"
#include "core/kvpage/convert_internal.h"

namespace glimpse::kvpage::internal {
namespace {

#ifdef GLIMPSE_KVPAGE_AVX2
// Vector FloatToE4m3 of y (finite), as int32 codes.
inline __m256i E4m3Codes(__m256 y) {
  const __m256i sign =
      _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(y), 24), _mm256_set1_epi32(0x80));
  const __m256 a =
      _mm256_min_ps(_mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))),
                    _mm256_set1_ps(kE4m3Max));
  __m256i u = _mm256_castps_si256(a);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFFF)));
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(960));
  const __m256i sub = _mm256_cvtps_epi32(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)));
  const __m256 is_sub = _mm256_cmp_ps(a, _mm256_set1_ps(0.015625f), _CMP_LT_OQ);
  const __m256i code = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(normal), _mm256_castsi256_ps(sub), is_sub));
  return _mm256_or_si256(code, sign);
}
#endif

void Fp8EncodeRow(const float* x, int64_t hd, float inv, uint8_t* out) {
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  const __m256 vinv = _mm256_set1_ps(inv);
  for (; c + 32 <= hd; c += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k)
      q[k] = E4m3Codes(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * k), vinv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c),
                        PackBytes(q[0], q[1], q[2], q[3], /*is_signed=*/false));
  }
#endif
  for (; c < hd; ++c) out[c] = FloatToE4m3(x[c] * inv);
}

void Fp8DecodeRow(const uint8_t* in, int64_t hd, float scale, float* x) {
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  // E4M3 → fp16 bits: (code & 0x7F) << 7 puts exponent and mantissa in place with fp16's bias
  // 15 instead of 7, so the value is 2^−8 times too small (subnormals included); ×256 fixes it.
  // 0x7F gets exponent 31 and a non-zero mantissa: NaN, as E4M3FN says.
  const __m256 vscale = _mm256_set1_ps(scale * 256.0f);
  const __m256i m7f = _mm256_set1_epi16(0x7F), m80 = _mm256_set1_epi16(0x80);
  for (; c + 16 <= hd; c += 16) {
    const __m256i b =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c)));
    const __m256i em = _mm256_and_si256(b, m7f);
    __m256i h =
        _mm256_or_si256(_mm256_slli_epi16(em, 7), _mm256_slli_epi16(_mm256_and_si256(b, m80), 8));
    h = _mm256_or_si256(h,
                        _mm256_and_si256(_mm256_cmpeq_epi16(em, m7f), _mm256_set1_epi16(0x7C00)));
    _mm256_storeu_ps(x + c, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), vscale));
    _mm256_storeu_ps(x + c + 8,
                     _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), vscale));
  }
#endif
  for (; c < hd; ++c) x[c] = E4m3ToFloat(in[c]) * scale;
}

}  // namespace

// ---- fp16 ----

size_t Fp16Bytes(Role, int64_t n, int64_t hd, int64_t) { return static_cast<size_t>(2 * n * hd); }

absl::Status Fp16Encode(Role, const float* x, int64_t n, int64_t hd, int64_t, uint8_t* out) {
  return EncodeHalfRows("fp16", x, n * hd, hd, 0, out);
}

void Fp16Decode(Role, const uint8_t* in, int64_t n, int64_t hd, int64_t, float* x) {
  DecodeHalfRows(in, n * hd, x);
}

// ---- fp32 ----

size_t Fp32Bytes(Role, int64_t n, int64_t hd, int64_t) { return static_cast<size_t>(4 * n * hd); }

absl::Status Fp32Encode(Role, const float* x, int64_t n, int64_t hd, int64_t, uint8_t* out) {
  RETURN_IF_ERROR(FirstOutOfRange("fp32", x, n * hd, hd, 0, kFloatMax));
  std::memcpy(out, x, static_cast<size_t>(4 * n * hd));
  return absl::OkStatus();
}

void Fp32Decode(Role, const uint8_t* in, int64_t n, int64_t hd, int64_t, float* x) {
  std::memcpy(x, in, static_cast<size_t>(4 * n * hd));
}

// ---- bf16 ----

size_t Bf16Bytes(Role, int64_t n, int64_t hd, int64_t) { return static_cast<size_t>(2 * n * hd); }

absl::Status Bf16Encode(Role, const float* x, int64_t n, int64_t hd, int64_t, uint8_t* out) {
  const int64_t count = n * hd;
  int64_t i = 0;
  bool ok = true;
#ifdef GLIMPSE_KVPAGE_AVX2
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 limit = _mm256_set1_ps(kBf16Max);
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF);
  __m256 bad = _mm256_setzero_ps();
  for (; i + 16 <= count; i += 16) {
    __m256i w[2];
    for (int k = 0; k < 2; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_NLE_UQ));
      const __m256i u = _mm256_castps_si256(v);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
      w[k] = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, odd)), 16);
    }
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(w[0], w[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), packed);
  }
  ok = _mm256_movemask_ps(bad) == 0;
#endif
  for (; i < count; ++i) {
    ok &= std::fabs(x[i]) <= kBf16Max;
    const uint16_t h = FloatToBf16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
  if (!ok) return FirstOutOfRange("bf16", x, count, hd, 0, kBf16Max);
  return absl::OkStatus();
}

void Bf16Decode(Role, const uint8_t* in, int64_t n, int64_t hd, int64_t, float* x) {
  const int64_t count = n * hd;
  int64_t i = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  for (; i + 8 <= count; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
#endif
  for (; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    x[i] = Bf16ToFloat(h);
  }
}

// ---- fp8 e4m3: f32 scale[n]; u8 code[n·hd] ----

size_t Fp8Bytes(Role, int64_t n, int64_t hd, int64_t) {
  return static_cast<size_t>(4 * n + n * hd);
}

absl::Status Fp8Encode(Role, const float* x, int64_t n, int64_t hd, int64_t, uint8_t* out) {
  uint8_t* codes = out + 4 * n;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * hd;
    const uint32_t bits = AbsMaxBits(row, hd);
    if (bits >= 0x7F800000) return FirstOutOfRange("fp8_e4m3", row, hd, hd, t, kFloatMax);
    const float absmax = BitsFloat(bits);
    const float scale = absmax >= kTinyAbsMax ? absmax / kE4m3Max : 0.0f;
    const float inv = absmax >= kTinyAbsMax ? kE4m3Max / absmax : 0.0f;
    std::memcpy(out + 4 * t, &scale, 4);
    Fp8EncodeRow(row, hd, inv, codes + t * hd);
  }
  return absl::OkStatus();
}

void Fp8Decode(Role, const uint8_t* in, int64_t n, int64_t hd, int64_t, float* x) {
  const uint8_t* codes = in + 4 * n;
  for (int64_t t = 0; t < n; ++t) {
    float scale;
    std::memcpy(&scale, in + 4 * t, 4);
    Fp8DecodeRow(codes + t * hd, hd, scale, x + t * hd);
  }
}

}  // namespace glimpse::kvpage::internal
