// Integer codecs: int8 (symmetric, per-token scale) and KIVI int4/int2 (asymmetric; keys per
// channel over token groups, values per token over channel groups; codec.h has the layouts).
#include <algorithm>
#include <cstring>

#include "core/common/status_macros.h"
#include "core/kvpage/codec_internal.h"
#include "core/kvpage/convert_internal.h"

namespace glimpse::kvpage::internal {
namespace {

// ---- int8 rows ----

void Int8EncodeRow(const float* x, int64_t hd, float inv, int8_t* out) {
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (; c + 32 <= hd; c += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * k), vinv));
      q[k] = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c),
                        PackBytes(q[0], q[1], q[2], q[3], /*is_signed=*/true));
  }
#endif
  for (; c < hd; ++c) {
    const float r = std::nearbyint(x[c] * inv);
    out[c] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
}

void Int8DecodeRow(const int8_t* in, int64_t hd, float scale, float* x) {
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  const __m256 vscale = _mm256_set1_ps(scale);
  for (; c + 8 <= hd; c += 8) {
    const __m256i q =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + c)));
    _mm256_storeu_ps(x + c, _mm256_mul_ps(_mm256_cvtepi32_ps(q), vscale));
  }
#endif
  for (; c < hd; ++c) x[c] = static_cast<float>(in[c]) * scale;
}

// ---- KIVI ----

// zero = min rounded down to fp16, scale = (max − zero)/L rounded up to fp16; inv = 1/scale
// (0 where scale is 0). mn, mx, zero_f, inv_f: [count]; scale_h, zero_h: [count] fp16 bytes.
template <int BITS>
void GroupParams(const float* mn, const float* mx, int64_t count, uint8_t* scale_h, uint8_t* zero_h,
                 float* zero_f, float* inv_f) {
  constexpr float kLevels = (1 << BITS) - 1;
  int64_t i = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  for (; i + 8 <= count; i += 8) {
    const __m128i zh = _mm256_cvtps_ph(_mm256_loadu_ps(mn + i), _MM_FROUND_TO_NEG_INF);
    const __m256 zf = _mm256_cvtph_ps(zh);
    const __m256 s =
        _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(mx + i), zf), _mm256_set1_ps(kLevels));
    const __m128i sh = _mm256_cvtps_ph(s, _MM_FROUND_TO_POS_INF);
    const __m256 sf = _mm256_cvtph_ps(sh);
    const __m256 inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), sf),
                                     _mm256_cmp_ps(sf, _mm256_setzero_ps(), _CMP_GT_OQ));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(zero_h + 2 * i), zh);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(scale_h + 2 * i), sh);
    _mm256_storeu_ps(zero_f + i, zf);
    _mm256_storeu_ps(inv_f + i, inv);
  }
#endif
  for (; i < count; ++i) {
    const uint16_t zh = FloatToHalfDown(mn[i]);
    const float zf = HalfToFloat(zh);
    const uint16_t sh = FloatToHalfUp((mx[i] - zf) / kLevels);
    const float sf = HalfToFloat(sh);
    std::memcpy(zero_h + 2 * i, &zh, 2);
    std::memcpy(scale_h + 2 * i, &sh, 2);
    zero_f[i] = zf;
    inv_f[i] = sf > 0.0f ? 1.0f / sf : 0.0f;
  }
}

#ifdef GLIMPSE_KVPAGE_AVX2
// 32 codes (bytes 0..2^BITS − 1, lane order) → 4·BITS packed bytes at out, low bits first.
template <int BITS>
inline void StorePacked(__m256i bytes, uint8_t* out) {
  if constexpr (BITS == 4) {
    const __m256i w = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));  // b0 + 16·b1
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(p));
  } else {
    const __m256i w = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x0401));  // b0 + 4·b1
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0xD8);
    const __m128i w2 = _mm_maddubs_epi16(_mm256_castsi256_si128(p), _mm_set1_epi16(0x1001));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w2, w2));
  }
}

// Packed codes of 32 channels → two vectors of 16 code bytes each, in channel order.
template <int BITS>
inline void LoadCodes(const uint8_t* in, __m128i* c0, __m128i* c1) {
  if constexpr (BITS == 4) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    *c0 = _mm_unpacklo_epi8(lo, hi);
    *c1 = _mm_unpackhi_epi8(lo, hi);
  } else {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in));
    const __m128i m = _mm_set1_epi8(0x03);
    const __m128i s0 = _mm_and_si128(b, m), s1 = _mm_and_si128(_mm_srli_epi16(b, 2), m);
    const __m128i s2 = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    const __m128i s3 = _mm_and_si128(_mm_srli_epi16(b, 6), m);
    const __m128i a = _mm_unpacklo_epi8(s0, s1), d = _mm_unpacklo_epi8(s2, s3);
    *c0 = _mm_unpacklo_epi16(a, d);
    *c1 = _mm_unpackhi_epi16(a, d);
  }
}
#endif

// Parameters are per channel (keys: arrays of hd) or per 32-channel group (values: arrays of gc).
template <bool PER_CHANNEL>
inline int64_t ParamIndex(int64_t c) {
  return PER_CHANNEL ? c : c / kKiviGroup;
}

// code[c] = clamp(round((x[c] − zero)·inv), 0, L), packed into out[⌈hd·BITS/8⌉].
template <int BITS, bool PER_CHANNEL>
void KiviQuantizeRow(const float* x, const float* zero_f, const float* inv_f, int64_t hd,
                     uint8_t* out) {
  constexpr int kLevels = (1 << BITS) - 1;
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  const __m256i lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(kLevels);
  for (; c + 32 <= hd; c += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const int64_t cc = c + 8 * k;
      const __m256 z = PER_CHANNEL ? _mm256_loadu_ps(zero_f + cc) : _mm256_set1_ps(zero_f[c / 32]);
      const __m256 iv = PER_CHANNEL ? _mm256_loadu_ps(inv_f + cc) : _mm256_set1_ps(inv_f[c / 32]);
      const __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + cc), z), iv);
      q[k] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(t), lo), hi);
    }
    StorePacked<BITS>(PackBytes(q[0], q[1], q[2], q[3], /*is_signed=*/false), out + c * BITS / 8);
  }
#endif
  std::memset(out + c * BITS / 8, 0, (hd * BITS + 7) / 8 - c * BITS / 8);
  for (; c < hd; ++c) {
    const int64_t p = ParamIndex<PER_CHANNEL>(c);
    const float r = std::nearbyint((x[c] - zero_f[p]) * inv_f[p]);
    const int code = static_cast<int>(std::clamp(r, 0.0f, static_cast<float>(kLevels)));
    out[c * BITS / 8] |= static_cast<uint8_t>(code << ((c * BITS) % 8));
  }
}

// x[c] = code[c]·scale + zero (one fused multiply-add, as in the vector path).
template <int BITS, bool PER_CHANNEL>
void KiviDequantizeRow(const uint8_t* in, const float* scale_f, const float* zero_f, int64_t hd,
                       float* x) {
  constexpr int kLevels = (1 << BITS) - 1;
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  for (; c + 32 <= hd; c += 32) {
    __m128i codes[2];
    LoadCodes<BITS>(in + c * BITS / 8, &codes[0], &codes[1]);
    for (int k = 0; k < 4; ++k) {
      const int64_t cc = c + 8 * k;
      const __m128i b8 = (k & 1) ? _mm_srli_si128(codes[k / 2], 8) : codes[k / 2];
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b8));
      const __m256 s =
          PER_CHANNEL ? _mm256_loadu_ps(scale_f + cc) : _mm256_set1_ps(scale_f[c / 32]);
      const __m256 z = PER_CHANNEL ? _mm256_loadu_ps(zero_f + cc) : _mm256_set1_ps(zero_f[c / 32]);
      _mm256_storeu_ps(x + cc, _mm256_fmadd_ps(f, s, z));
    }
  }
#endif
  for (; c < hd; ++c) {
    const int64_t p = ParamIndex<PER_CHANNEL>(c);
    const int code = (in[c * BITS / 8] >> ((c * BITS) % 8)) & kLevels;
    x[c] = std::fma(static_cast<float>(code), scale_f[p], zero_f[p]);
  }
}

// Sizes of a KIVI section: parameters (count of fp16 scale/zero each), code row bytes.
struct KiviShape {
  int64_t q, params, row_bytes;
};
template <int BITS>
KiviShape ShapeOf(Role role, int64_t n, int64_t hd, int64_t residual) {
  const int64_t q = n - residual;
  const int64_t params = role == Role::kKeys ? (q + kKiviGroup - 1) / kKiviGroup * hd
                                             : q * ((hd + kKiviGroup - 1) / kKiviGroup);
  return {q, params, (hd * BITS + 7) / 8};
}

// Per-channel min and max over rows [0, rows) of x[rows, hd]; false if any |x| > 65504 or NaN.
// Row-major, so the rows stream through the cache in order.
bool ColumnMinMax(const float* x, int64_t rows, int64_t hd, float* mn, float* mx) {
  std::memcpy(mn, x, 4 * hd);
  std::memcpy(mx, x, 4 * hd);
  bool ok = true;
  int64_t simd_end = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  simd_end = hd / 8 * 8;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 limit = _mm256_set1_ps(kHalfMax);
  __m256 bad = _mm256_setzero_ps();
  for (int64_t t = 0; t < rows; ++t) {
    const float* row = x + t * hd;
    for (int64_t c = 0; c < simd_end; c += 8) {
      const __m256 v = _mm256_loadu_ps(row + c);
      // NOTE: NLE_UQ is true for NaN too, which min/max would silently drop.
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_NLE_UQ));
      _mm256_storeu_ps(mn + c, _mm256_min_ps(_mm256_loadu_ps(mn + c), v));
      _mm256_storeu_ps(mx + c, _mm256_max_ps(_mm256_loadu_ps(mx + c), v));
    }
  }
  ok = _mm256_movemask_ps(bad) == 0;
#endif
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c = simd_end; c < hd; ++c) {
      const float v = x[t * hd + c];
      ok &= std::fabs(v) <= kHalfMax;
      mn[c] = std::min(mn[c], v);
      mx[c] = std::max(mx[c], v);
    }
  }
  return ok;
}

// Min and max of each 32-channel group of one row: mn, mx [⌈hd/32⌉]; false if any |x| > 65504
// or NaN.
bool GroupMinMax(const float* row, int64_t hd, float* mn, float* mx) {
  int64_t c = 0;
  bool ok = true;
#ifdef GLIMPSE_KVPAGE_AVX2
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 limit = _mm256_set1_ps(kHalfMax);
  __m256 bad = _mm256_setzero_ps();
  for (; c + 32 <= hd; c += 32) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(row + c + 8 * k);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v[k], abs_mask), limit, _CMP_NLE_UQ));
    }
    __m256 lo = _mm256_min_ps(_mm256_min_ps(v[0], v[1]), _mm256_min_ps(v[2], v[3]));
    __m256 hi = _mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3]));
    lo = _mm256_min_ps(lo, _mm256_permute2f128_ps(lo, lo, 1));
    hi = _mm256_max_ps(hi, _mm256_permute2f128_ps(hi, hi, 1));
    lo = _mm256_min_ps(lo, _mm256_shuffle_ps(lo, lo, 0x4E));
    hi = _mm256_max_ps(hi, _mm256_shuffle_ps(hi, hi, 0x4E));
    lo = _mm256_min_ps(lo, _mm256_shuffle_ps(lo, lo, 0xB1));
    hi = _mm256_max_ps(hi, _mm256_shuffle_ps(hi, hi, 0xB1));
    mn[c / 32] = _mm256_cvtss_f32(lo);
    mx[c / 32] = _mm256_cvtss_f32(hi);
  }
  ok = _mm256_movemask_ps(bad) == 0;
#endif
  for (; c < hd; c += kKiviGroup) {
    const int64_t end = std::min(hd, c + kKiviGroup);
    float lo = row[c], hi = row[c];
    for (int64_t k = c; k < end; ++k) {
      ok &= std::fabs(row[k]) <= kHalfMax;
      lo = std::min(lo, row[k]);
      hi = std::max(hi, row[k]);
    }
    mn[c / 32] = lo;
    mx[c / 32] = hi;
  }
  return ok;
}

template <int BITS>
absl::Status KiviEncodeKeys(const char* name, const float* x, int64_t hd, const KiviShape& s,
                            uint8_t* out) {
  uint8_t* scale_h = out;
  uint8_t* zero_h = out + 2 * s.params;
  uint8_t* codes = out + 4 * s.params;
  float mn[kMaxHeadDim], mx[kMaxHeadDim], zero_f[kMaxHeadDim], inv_f[kMaxHeadDim];
  for (int64_t g = 0; g * kKiviGroup < s.q; ++g) {
    const int64_t r0 = g * kKiviGroup, rows = std::min(kKiviGroup, s.q - r0);
    if (!ColumnMinMax(x + r0 * hd, rows, hd, mn, mx)) {
      return FirstOutOfRange(name, x + r0 * hd, rows * hd, hd, r0, kHalfMax);
    }
    GroupParams<BITS>(mn, mx, hd, scale_h + 2 * g * hd, zero_h + 2 * g * hd, zero_f, inv_f);
    for (int64_t t = r0; t < r0 + rows; ++t) {
      KiviQuantizeRow<BITS, true>(x + t * hd, zero_f, inv_f, hd, codes + t * s.row_bytes);
    }
  }
  return absl::OkStatus();
}

template <int BITS>
absl::Status KiviEncodeValues(const char* name, const float* x, int64_t hd, const KiviShape& s,
                              uint8_t* out) {
  const int64_t gc = (hd + kKiviGroup - 1) / kKiviGroup;
  uint8_t* scale_h = out;
  uint8_t* zero_h = out + 2 * s.params;
  uint8_t* codes = out + 4 * s.params;
  // Rows go in blocks so that GroupParams sees ≥ 8 groups at a time (its vector width) even for
  // head_dim 64; a block's parameters are contiguous in the [q, gc] layout.
  constexpr int64_t kRows = 32, kCap = kRows * kMaxHeadDim / kKiviGroup;
  float mn[kCap], mx[kCap], zero_f[kCap], inv_f[kCap];
  for (int64_t t0 = 0; t0 < s.q; t0 += kRows) {
    const int64_t rows = std::min(kRows, s.q - t0);
    for (int64_t t = t0; t < t0 + rows; ++t) {
      const float* row = x + t * hd;
      if (!GroupMinMax(row, hd, mn + (t - t0) * gc, mx + (t - t0) * gc)) {
        return FirstOutOfRange(name, row, hd, hd, t, kHalfMax);
      }
    }
    GroupParams<BITS>(mn, mx, rows * gc, scale_h + 2 * t0 * gc, zero_h + 2 * t0 * gc, zero_f,
                      inv_f);
    for (int64_t t = t0; t < t0 + rows; ++t) {
      KiviQuantizeRow<BITS, false>(x + t * hd, zero_f + (t - t0) * gc, inv_f + (t - t0) * gc, hd,
                                   codes + t * s.row_bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace

// ---- int8: f32 scale[n]; i8 code[n·hd] ----

size_t Int8Bytes(Role, int64_t n, int64_t hd, int64_t) {
  return static_cast<size_t>(4 * n + n * hd);
}

absl::Status Int8Encode(Role, const float* x, int64_t n, int64_t hd, int64_t, uint8_t* out) {
  int8_t* codes = reinterpret_cast<int8_t*>(out + 4 * n);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * hd;
    const uint32_t bits = AbsMaxBits(row, hd);
    if (bits >= 0x7F800000) return FirstOutOfRange("int8", row, hd, hd, t, kFloatMax);
    const float absmax = BitsFloat(bits);
    const float scale = absmax >= kTinyAbsMax ? absmax / 127.0f : 0.0f;
    const float inv = absmax >= kTinyAbsMax ? 127.0f / absmax : 0.0f;
    std::memcpy(out + 4 * t, &scale, 4);
    Int8EncodeRow(row, hd, inv, codes + t * hd);
  }
  return absl::OkStatus();
}

void Int8Decode(Role, const uint8_t* in, int64_t n, int64_t hd, int64_t, float* x) {
  const int8_t* codes = reinterpret_cast<const int8_t*>(in + 4 * n);
  for (int64_t t = 0; t < n; ++t) {
    float scale;
    std::memcpy(&scale, in + 4 * t, 4);
    Int8DecodeRow(codes + t * hd, hd, scale, x + t * hd);
  }
}

// ---- KIVI ----

template <int BITS>
size_t KiviBytes(Role role, int64_t n, int64_t hd, int64_t residual) {
  const KiviShape s = ShapeOf<BITS>(role, n, hd, residual);
  return static_cast<size_t>(4 * s.params + s.q * s.row_bytes + 2 * residual * hd);
}

template <int BITS>
absl::Status KiviEncode(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                        uint8_t* out) {
  const char* name = BITS == 4 ? "kivi4" : "kivi2";
  const KiviShape s = ShapeOf<BITS>(role, n, hd, residual);
  if (role == Role::kKeys) {
    RETURN_IF_ERROR(KiviEncodeKeys<BITS>(name, x, hd, s, out));
  } else {
    RETURN_IF_ERROR(KiviEncodeValues<BITS>(name, x, hd, s, out));
  }
  uint8_t* res = out + 4 * s.params + s.q * s.row_bytes;
  return EncodeHalfRows(name, x + s.q * hd, residual * hd, hd, s.q, res);
}

template <int BITS>
void KiviDecode(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x) {
  const KiviShape s = ShapeOf<BITS>(role, n, hd, residual);
  const uint8_t* codes = in + 4 * s.params;
  float scale_f[kMaxHeadDim], zero_f[kMaxHeadDim];
  if (role == Role::kKeys) {
    for (int64_t g = 0; g * kKiviGroup < s.q; ++g) {
      DecodeHalfRows(in + 2 * g * hd, hd, scale_f);
      DecodeHalfRows(in + 2 * s.params + 2 * g * hd, hd, zero_f);
      const int64_t r1 = std::min(s.q, (g + 1) * kKiviGroup);
      for (int64_t t = g * kKiviGroup; t < r1; ++t) {
        KiviDequantizeRow<BITS, true>(codes + t * s.row_bytes, scale_f, zero_f, hd, x + t * hd);
      }
    }
  } else {
    const int64_t gc = (hd + kKiviGroup - 1) / kKiviGroup;
    for (int64_t t = 0; t < s.q; ++t) {
      DecodeHalfRows(in + 2 * t * gc, gc, scale_f);
      DecodeHalfRows(in + 2 * s.params + 2 * t * gc, gc, zero_f);
      KiviDequantizeRow<BITS, false>(codes + t * s.row_bytes, scale_f, zero_f, hd, x + t * hd);
    }
  }
  DecodeHalfRows(codes + s.q * s.row_bytes, residual * hd, x + s.q * hd);
}

template size_t KiviBytes<4>(Role, int64_t, int64_t, int64_t);
template size_t KiviBytes<2>(Role, int64_t, int64_t, int64_t);
template absl::Status KiviEncode<4>(Role, const float*, int64_t, int64_t, int64_t, uint8_t*);
template absl::Status KiviEncode<2>(Role, const float*, int64_t, int64_t, int64_t, uint8_t*);
template void KiviDecode<4>(Role, const uint8_t*, int64_t, int64_t, int64_t, float*);
template void KiviDecode<2>(Role, const uint8_t*, int64_t, int64_t, int64_t, float*);

}  // namespace glimpse::kvpage::internal
