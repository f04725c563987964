// The codec registry and the helpers every codec shares (fp16 rows and range errors).
#include "core/kvpage/codec.h"

#include <array>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/kvpage/codec_internal.h"
#include "core/kvpage/convert_internal.h"

namespace glimpse::kvpage {
namespace {

using namespace internal;  // NOLINT: the entry points listed below

constexpr std::array<CodecInfo, 7> kCodecs = {{
    {Codec::kFp16, "fp16", false, &Fp16Bytes, &Fp16Encode, &Fp16Decode},
    {Codec::kBf16, "bf16", false, &Bf16Bytes, &Bf16Encode, &Bf16Decode},
    {Codec::kFp8E4M3, "fp8_e4m3", false, &Fp8Bytes, &Fp8Encode, &Fp8Decode},
    {Codec::kInt8, "int8", false, &Int8Bytes, &Int8Encode, &Int8Decode},
    {Codec::kKivi4, "kivi4", true, &KiviBytes<4>, &KiviEncode<4>, &KiviDecode<4>},
    {Codec::kKivi2, "kivi2", true, &KiviBytes<2>, &KiviEncode<2>, &KiviDecode<2>},
    {Codec::kFp32, "fp32", false, &Fp32Bytes, &Fp32Encode, &Fp32Decode},
}};

}  // namespace

std::span<const CodecInfo> AllCodecs() { return kCodecs; }

const CodecInfo* FindCodec(uint8_t id) {
  for (const CodecInfo& c : kCodecs) {
    if (static_cast<uint8_t>(c.id) == id) return &c;
  }
  return nullptr;
}

const CodecInfo* FindCodecByName(std::string_view name) {
  for (const CodecInfo& c : kCodecs) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

const char* CodecName(Codec codec) {
  const CodecInfo* info = FindCodec(static_cast<uint8_t>(codec));
  return info ? info->name : "unknown";
}

namespace internal {

absl::Status FirstOutOfRange(const char* codec, const float* x, int64_t count, int64_t hd,
                             int64_t first_row, float limit) {
  for (int64_t i = 0; i < count; ++i) {
    if (!(std::fabs(x[i]) <= limit)) {
      return absl::InvalidArgumentError(
          absl::StrCat(codec, " codec cannot store row ", first_row + i / hd, " column ", i % hd,
                       ": value ", x[i], " is not finite or beyond ±", limit));
    }
  }
  return absl::OkStatus();
}

absl::Status EncodeHalfRows(const char* codec, const float* x, int64_t count, int64_t hd,
                            int64_t first_row, uint8_t* out) {
  int64_t i = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 limit = _mm256_set1_ps(kHalfMax);
  __m256 bad = _mm256_setzero_ps();
  for (; i + 16 <= count; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    // NOTE: NLE_UQ is true for NaN too, so one compare catches NaN, inf and overflow.
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(a, abs_mask), limit, _CMP_NLE_UQ));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(b, abs_mask), limit, _CMP_NLE_UQ));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i + 16),
                     _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
  }
  if (_mm256_movemask_ps(bad) != 0)
    return FirstOutOfRange(codec, x, count, hd, first_row, kHalfMax);
#endif
  bool ok = true;
  for (; i < count; ++i) {
    ok &= std::fabs(x[i]) <= kHalfMax;
    const uint16_t h = FloatToHalf(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
  if (!ok) return FirstOutOfRange(codec, x, count, hd, first_row, kHalfMax);
  return absl::OkStatus();
}

void DecodeHalfRows(const uint8_t* in, int64_t count, float* x) {
  int64_t i = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  for (; i + 16 <= count; i += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i + 16));
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(a));
    _mm256_storeu_ps(x + i + 8, _mm256_cvtph_ps(b));
  }
#endif
  for (; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    x[i] = HalfToFloat(h);
  }
}

uint32_t AbsMaxBits(const float* x, int64_t hd) {
  uint32_t m = 0;
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  // NOTE: |x| as int32 bits orders like the floats, and NaN/inf sort above every finite value.
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i acc = _mm256_setzero_si256();
  for (; c + 8 <= hd; c += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c));
    acc = _mm256_max_epu32(acc, _mm256_and_si256(v, abs_mask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  for (uint32_t l : lanes) m = l > m ? l : m;
#endif
  for (; c < hd; ++c) {
    const uint32_t b = FloatBits(x[c]) & 0x7FFFFFFF;
    m = b > m ? b : m;
  }
  return m;
}

}  // namespace internal
}  // namespace glimpse::kvpage
