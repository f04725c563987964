// AVX2 + FMA + F16C fast paths for quant.h, tested against the references in quant.cc.
// DotRowsAvx2 decodes weights inside registers (nibbles via and/shift + vpmovzxbd + vcvtdq2ps,
// int8 via vpmovsxbd, fp16 via vcvtph2ps) and FMAs them with fp32 x, R rows per pass so each load
// of x and each per-block Σx serves R rows.
#include "kernels/cpu/quant_internal.h"
#include "kernels/cpu/simd.h"

#ifdef GLIMPSE_KERNELS_AVX2

#include <immintrin.h>

#include <vector>

namespace glimpse::kernels::internal {
namespace {

// NOTE: the row kernels prefetch the same offset kPrefetchGroups passes (of R rows) ahead: decode
// reads R interleaved streams of a few hundred bytes each, too short for the hardware prefetcher
// to train on (without it the 30 MB Q8_0 output matrix streamed at ~5 GB/s instead of ~10 GB/s on
// one core of the development machine). Addresses past the matrix are harmless: prefetches never
// fault.
constexpr int64_t kPrefetchGroups = 2;

float Half(uint16_t h) { return _cvtsh_ss(h); }

// Eight consecutive int8 → 8 fp32 lanes.
__m256 SBytesToFloat(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

__m256 LoadBf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
__m256 LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Broadcast of one fp16 value as 8 fp32 lanes.
__m256 BroadcastHalf(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(*h)));
}

// The 32 nibbles of a 4-bit block as fp32 in element order: q[0] = elements 0..7 (low nibbles of
// qs[0..7]), q[1] = 8..15 (low of qs[8..15]), q[2] = 16..23 (high of qs[0..7]), q[3] = 24..31.
// Bytes are widened to int32 first, so a 32-bit shift by 4 yields the high nibble with no mask.
void NibblesToFloat(const uint8_t* qs, __m256 q[4]) {
  const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
  const __m256i hi =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
  const __m256i mask = _mm256_set1_epi32(0x0f);
  q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(lo, mask));
  q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(hi, mask));
  q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 4));
  q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 4));
}

// Dequantise one 4-bit block: out[j] = d·nib[j] + bias (bias = m for Q4_1, −8·d for Q4_0).
void DequantNibbles(float* out, const uint8_t* qs, float d, float bias) {
  __m256 q[4];
  NibblesToFloat(qs, q);
  const __m256 vd = _mm256_set1_ps(d), vb = _mm256_set1_ps(bias);
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, _mm256_fmadd_ps(vd, q[k], vb));
}

// Block formats as DotBlockRows sees them: Quants() gives the block's 32 unscaled values, Scale()
// d, and Min() the offset m added to every element (x = d·q + m), where kHasMin.
struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Quants(const Block& blk, __m256 q[4]) {
    for (int k = 0; k < 4; ++k) q[k] = SBytesToFloat(blk.qs + 8 * k);
  }
  static __m256 Scale(const Block& blk) { return BroadcastHalf(&blk.d); }
  static __m256 Min(const Block&, __m256) { return _mm256_setzero_ps(); }
};
struct Q4_0Format {
  using Block = BlockQ4_0;
  static constexpr bool kHasMin = true;
  static void Quants(const Block& blk, __m256 q[4]) { NibblesToFloat(blk.qs, q); }
  static __m256 Scale(const Block& blk) { return BroadcastHalf(&blk.d); }
  // d·(nib − 8) = d·nib + (−8·d); −8·d is exact.
  static __m256 Min(const Block&, __m256 d) { return _mm256_mul_ps(d, _mm256_set1_ps(-8.0f)); }
};
struct Q4_1Format {
  using Block = BlockQ4_1;
  static constexpr bool kHasMin = true;
  static void Quants(const Block& blk, __m256 q[4]) { NibblesToFloat(blk.qs, q); }
  static __m256 Scale(const Block& blk) { return BroadcastHalf(&blk.d); }
  static __m256 Min(const Block& blk, __m256) { return BroadcastHalf(&blk.m); }
};

// out[r] = Σ_b d_rb·Σ_j q_rbj·x_bj + m_rb·Σ_j x_bj for R rows of nb blocks. Per block, x's four
// vectors and Σx are loaded once for all R rows; the per-row sums stay in 8 lanes until the end.
template <typename Format, int R>
void DotBlockRows(float* out, const uint8_t* w, int64_t w_stride, const float* x, int64_t nb) {
  using Block = typename Format::Block;
  const Block* rows[R];
  __m256 acc[R], acc_min[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = reinterpret_cast<const Block*>(w + r * w_stride);
    acc[r] = acc_min[r] = _mm256_setzero_ps();
  }
  const int64_t ahead = kPrefetchGroups * R * w_stride;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * QK;  // [QK]
    const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
    const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
    __m256 sum_x = _mm256_setzero_ps();
    if constexpr (Format::kHasMin)
      sum_x = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
    for (int r = 0; r < R; ++r) {
      const Block& blk = rows[r][b];
      _mm_prefetch(reinterpret_cast<const char*>(&blk) + ahead, _MM_HINT_T0);
      __m256 q[4];
      Format::Quants(blk, q);
      const __m256 s = _mm256_add_ps(_mm256_fmadd_ps(q[1], x1, _mm256_mul_ps(q[0], x0)),
                                     _mm256_fmadd_ps(q[3], x3, _mm256_mul_ps(q[2], x2)));
      const __m256 d = Format::Scale(blk);
      acc[r] = _mm256_fmadd_ps(d, s, acc[r]);
      if constexpr (Format::kHasMin)
        acc_min[r] = _mm256_fmadd_ps(Format::Min(blk, d), sum_x, acc_min[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HorizontalSum(_mm256_add_ps(acc[r], acc_min[r]));
}

// DotBlockRows<Format, 1> of one row for T tokens (x + t·n): the row's blocks are decoded once for
// all T, and per token the operations are DotBlockRows's in its order (sum_x[t·nb + b] is its
// per-block Σx vector), so out[t·out_stride] equals what DotBlockRows gives token t alone.
template <typename Format, int T>
void DotBlockRowTokens(float* out, int64_t out_stride, const uint8_t* w, int64_t w_stride,
                       const float* x, const float* sum_x, int64_t nb) {
  using Block = typename Format::Block;
  const Block* row = reinterpret_cast<const Block*>(w);
  const int64_t n = nb * QK;
  __m256 acc[T], acc_min[T];
  for (int t = 0; t < T; ++t) acc[t] = acc_min[t] = _mm256_setzero_ps();
  const int64_t ahead = kPrefetchGroups * w_stride;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = row[b];
    _mm_prefetch(reinterpret_cast<const char*>(&blk) + ahead, _MM_HINT_T0);
    __m256 q[4];
    Format::Quants(blk, q);
    const __m256 d = Format::Scale(blk);
    for (int t = 0; t < T; ++t) {
      const float* xb = x + t * n + b * QK;
      const __m256 s = _mm256_add_ps(
          _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xb + 8), _mm256_mul_ps(q[0], _mm256_loadu_ps(xb))),
          _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xb + 24),
                          _mm256_mul_ps(q[2], _mm256_loadu_ps(xb + 16))));
      acc[t] = _mm256_fmadd_ps(d, s, acc[t]);
    }
    if constexpr (Format::kHasMin) {
      const __m256 min = Format::Min(blk, d);
      for (int t = 0; t < T; ++t)
        acc_min[t] = _mm256_fmadd_ps(min, _mm256_loadu_ps(sum_x + 8 * (t * nb + b)), acc_min[t]);
    }
  }
  for (int t = 0; t < T; ++t)
    out[t * out_stride] = HorizontalSum(_mm256_add_ps(acc[t], acc_min[t]));
}

// Rows [0, rows) of a block format for T tokens.
template <typename Format, int T>
void DotBlockRowsTokens(float* out, int64_t out_stride, const uint8_t* w, int64_t w_stride,
                        int64_t rows, const float* x, const float* sum_x, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    DotBlockRowTokens<Format, T>(out + r, out_stride, w + r * w_stride, w_stride, x, sum_x, n / QK);
  }
}

template <typename Format>
void DotBlockTokens(float* out, int64_t out_stride, const uint8_t* w, int64_t w_stride,
                    int64_t rows, const float* x, int64_t m, int64_t n) {
  constexpr int kTokens = 4;  // tokens per decoded block: 8 accumulators + 4 quant vectors
  const int64_t nb = n / QK;
  // Per token and block, DotBlockRows's Σx vector, computed once for every row.
  thread_local std::vector<float> sums;  // [m · nb][8]
  sums.resize(static_cast<size_t>(8 * m * nb));
  if constexpr (Format::kHasMin) {
    for (int64_t i = 0; i < m * nb; ++i) {
      const float* xb = x + i * QK;
      _mm256_storeu_ps(
          sums.data() + 8 * i,
          _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)),
                        _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24))));
    }
  }
  int64_t t = 0;
  for (; t + kTokens <= m; t += kTokens) {
    DotBlockRowsTokens<Format, kTokens>(out + t * out_stride, out_stride, w, w_stride, rows,
                                        x + t * n, sums.data() + 8 * t * nb, n);
  }
  float* o = out + t * out_stride;
  const float* xt = x + t * n;
  const float* st = sums.data() + 8 * t * nb;
  switch (m - t) {
    case 3:
      return DotBlockRowsTokens<Format, 3>(o, out_stride, w, w_stride, rows, xt, st, n);
    case 2:
      return DotBlockRowsTokens<Format, 2>(o, out_stride, w, w_stride, rows, xt, st, n);
    case 1:
      return DotBlockRowsTokens<Format, 1>(o, out_stride, w, w_stride, rows, xt, st, n);
  }
}

// out[r] = Σ_i w_ri·x_i for R rows of a plain type; `load(p)` decodes 8 elements at p, `decode`
// one. Two accumulators per row hide the FMA latency when R is small.
template <typename T, int R, typename Load, typename Decode>
void DotPlainRows(float* out, const uint8_t* w, int64_t w_stride, const float* x, int64_t n,
                  Load load, Decode decode) {
  const T* rows[R];
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = reinterpret_cast<const T*>(w + r * w_stride);
    acc0[r] = acc1[r] = _mm256_setzero_ps();
  }
  const int64_t ahead = kPrefetchGroups * R * w_stride;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[r] + i) + ahead, _MM_HINT_T0);
      acc0[r] = _mm256_fmadd_ps(load(rows[r] + i), x0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(load(rows[r] + i + 8), x1, acc1[r]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) acc0[r] = _mm256_fmadd_ps(load(rows[r] + i), x0, acc0[r]);
  }
  for (int r = 0; r < R; ++r) {
    float sum = HorizontalSum(_mm256_add_ps(acc0[r], acc1[r]));
    for (int64_t j = i; j < n; ++j) sum += decode(rows[r][j]) * x[j];
    out[r] = sum;
  }
}

// R rows of any type.
template <int R>
void DotRowsFixed(float* out, const uint8_t* w, int64_t w_stride, DType type, const float* x,
                  int64_t n) {
  switch (type) {
    // Lambdas rather than function pointers, so the loads inline into the loop.
    case DType::kF32:
      return DotPlainRows<float, R>(
          out, w, w_stride, x, n, [](const float* p) { return _mm256_loadu_ps(p); },
          [](float f) { return f; });
    case DType::kF16:
      return DotPlainRows<uint16_t, R>(
          out, w, w_stride, x, n, [](const uint16_t* p) { return LoadF16(p); },
          [](uint16_t h) { return Half(h); });
    case DType::kBF16:
      return DotPlainRows<uint16_t, R>(
          out, w, w_stride, x, n, [](const uint16_t* p) { return LoadBf16(p); },
          [](uint16_t h) { return Bf16ToFp32(h); });
    case DType::kQ8_0:
      return DotBlockRows<Q8_0Format, R>(out, w, w_stride, x, n / QK);
    case DType::kQ4_0:
      return DotBlockRows<Q4_0Format, R>(out, w, w_stride, x, n / QK);
    case DType::kQ4_1:
      return DotBlockRows<Q4_1Format, R>(out, w, w_stride, x, n / QK);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return;  // DotRowsAvx2 sends them to DotKQuantRowsAvx2
  }
}

// Eight consecutive uint8 → 8 int32 lanes.
__m256i UBytes(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Calls sink(i, w) for i = 0, 8, …, 248 with the super-block's weights i … i + 7 of a Q4_K / Q5_K
// block, each computed as the reference computes it (d·sc·q − dmin·m: a product, then a
// difference, never fused), so a sink that stores them gives DequantizeRowRef's values bit for bit.
template <typename Sink>
void Q45KWeights(const void* block, bool q5, Sink sink) {
  const BlockQ4_K* b4 = static_cast<const BlockQ4_K*>(block);
  const BlockQ5_K* b5 = static_cast<const BlockQ5_K*>(block);
  const float d = Half(q5 ? b5->d : b4->d), dmin = Half(q5 ? b5->dmin : b4->dmin);
  const uint8_t* scales = q5 ? b5->scales : b4->scales;
  const uint8_t* ql = q5 ? b5->qs : b4->qs;
  const __m256i low = _mm256_set1_epi32(0x0F), one = _mm256_set1_epi32(1);
  for (int g = 0; g < 4; ++g, ql += 32) {
    uint8_t sc, m;
    GetScaleMinK4(2 * g, scales, &sc, &m);
    const __m256 d1 = _mm256_set1_ps(d * sc), m1 = _mm256_set1_ps(dmin * m);
    GetScaleMinK4(2 * g + 1, scales, &sc, &m);
    const __m256 d2 = _mm256_set1_ps(d * sc), m2 = _mm256_set1_ps(dmin * m);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = UBytes(ql + 8 * c);
      __m256i lo = _mm256_and_si256(v, low), hi = _mm256_srli_epi32(v, 4);
      if (q5) {
        const __m256i h = UBytes(b5->qh + 8 * c);
        lo = _mm256_add_epi32(
            lo, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * g), one), 4));
        hi = _mm256_add_epi32(
            hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * g + 1), one), 4));
      }
      sink(64 * g + 8 * c, _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(lo)), m1));
      sink(64 * g + 32 + 8 * c, _mm256_sub_ps(_mm256_mul_ps(d2, _mm256_cvtepi32_ps(hi)), m2));
    }
  }
}

// As Q45KWeights for Q6_K: weights (d·sc)·(q − 32).
template <typename Sink>
void Q6KWeights(const BlockQ6_K& b, Sink sink) {
  const float d = Half(b.d);
  const __m256i low = _mm256_set1_epi32(0x0F), three = _mm256_set1_epi32(3);
  const __m256i bias = _mm256_set1_epi32(32);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8) {
    for (int c = 0; c < 4; ++c) {
      const int is = c / 2;  // elements 8c … 8c + 7 share the scale of l / 16
      const __m256i a = UBytes(ql + 8 * c), a32 = UBytes(ql + 32 + 8 * c), h = UBytes(qh + 8 * c);
      auto high = [&](int shift) {
        return _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, shift), three), 4);
      };
      const __m256i qs[4] = {
          _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(a, low), high(0)), bias),
          _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(a32, low), high(2)), bias),
          _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(a, 4), high(4)), bias),
          _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(a32, 4), high(6)), bias)};
      for (int k = 0; k < 4; ++k) {
        sink(128 * half + 32 * k + 8 * c,
             _mm256_mul_ps(_mm256_set1_ps(d * sc[is + 2 * k]), _mm256_cvtepi32_ps(qs[k])));
      }
    }
  }
}

// Calls sink(i, w) over a K-quant super-block of `type` (see Q45KWeights).
template <typename Sink>
void KWeights(const uint8_t* block, DType type, Sink sink) {
  if (type == DType::kQ6_K) return Q6KWeights(*reinterpret_cast<const BlockQ6_K*>(block), sink);
  Q45KWeights(block, type == DType::kQ5_K, sink);
}

void DotKQuantRowsAvx2(float* out, const uint8_t* w, int64_t w_stride, int64_t rows, DType type,
                       const float* x, int64_t n) {
  const int64_t nb = n / QK_K, block_bytes = BlockBytes(type);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + r * w_stride;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + b * QK_K;
      KWeights(row + b * block_bytes, type,
               [&](int i, __m256 wv) { acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xb + i), acc); });
    }
    out[r] = HorizontalSum(acc);
  }
}

}  // namespace

void DequantizeRowAvx2(float* out, const void* in, DType type, int64_t n) {
  const int64_t nb = n / QK;
  switch (type) {
    case DType::kF16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadF16(h + i));
      for (; i < n; ++i) out[i] = _cvtsh_ss(h[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadBf16(h + i));
      for (; i < n; ++i) out[i] = Bf16ToFp32(h[i]);
      return;
    }
    case DType::kQ8_0:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_0& blk = static_cast<const BlockQ8_0*>(in)[b];
        const __m256 d = _mm256_set1_ps(Half(blk.d));
        for (int k = 0; k < 4; ++k) {
          _mm256_storeu_ps(out + b * QK + 8 * k, _mm256_mul_ps(d, SBytesToFloat(blk.qs + 8 * k)));
        }
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(in)[b];
        const float d = Half(blk.d);
        // d·(nib − 8) == d·nib + (−8·d) exactly: −8·d is exact and so is the sum's rounding.
        DequantNibbles(out + b * QK, blk.qs, d, -8.0f * d);
      }
      return;
    case DType::kQ4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ4_1& blk = static_cast<const BlockQ4_1*>(in)[b];
        DequantNibbles(out + b * QK, blk.qs, Half(blk.d), Half(blk.m));
      }
      return;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      for (int64_t b = 0; b < n / QK_K; ++b) {
        float* y = out + b * QK_K;
        KWeights(static_cast<const uint8_t*>(in) + b * BlockBytes(type), type,
                 [y](int i, __m256 w) { _mm256_storeu_ps(y + i, w); });
      }
      return;
    case DType::kF32:
      break;
  }
  DequantizeRowRef(out, in, type, n);
}

void DotRowsAvx2(float* out, const void* w, int64_t w_stride, int64_t rows, DType type,
                 const float* x, int64_t n) {
  if (IsKQuant(type)) {
    return DotKQuantRowsAvx2(out, static_cast<const uint8_t*>(w), w_stride, rows, type, x, n);
  }
  constexpr int kRows = 4;  // rows per pass
  const uint8_t* base = static_cast<const uint8_t*>(w);
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    DotRowsFixed<kRows>(out + r, base + r * w_stride, w_stride, type, x, n);
  }
  switch (rows - r) {
    case 3:
      return DotRowsFixed<3>(out + r, base + r * w_stride, w_stride, type, x, n);
    case 2:
      return DotRowsFixed<2>(out + r, base + r * w_stride, w_stride, type, x, n);
    case 1:
      return DotRowsFixed<1>(out + r, base + r * w_stride, w_stride, type, x, n);
  }
}

void DotRowsTokensAvx2(float* out, int64_t out_stride, const void* w, int64_t w_stride,
                       int64_t rows, DType type, const float* x, int64_t m, int64_t n) {
  const uint8_t* base = static_cast<const uint8_t*>(w);
  switch (type) {
    case DType::kQ8_0:
      return DotBlockTokens<Q8_0Format>(out, out_stride, base, w_stride, rows, x, m, n);
    case DType::kQ4_0:
      return DotBlockTokens<Q4_0Format>(out, out_stride, base, w_stride, rows, x, m, n);
    case DType::kQ4_1:
      return DotBlockTokens<Q4_1Format>(out, out_stride, base, w_stride, rows, x, m, n);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      break;
  }
  // Plain types decode in one instruction: nothing to share between tokens (K-quants: token by
  // token for now).
  for (int64_t t = 0; t < m; ++t)
    DotRowsAvx2(out + t * out_stride, w, w_stride, rows, type, x + t * n, n);
}

}  // namespace glimpse::kernels::internal

#endif  // GLIMPSE_KERNELS_AVX2
