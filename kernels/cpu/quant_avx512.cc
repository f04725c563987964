// AVX-512 (F, BW, VL) paths for the block formats (Q8_0, Q4_0, Q4_1) of DotRows and DotRowsTokens,
// chosen at run time where the CPU has AVX-512 (UseAvx512). A 32-element block is two 16-lane
// vectors, so a block costs half the AVX2 path's decode and FMA instructions; plain types stay on
// the AVX2 path (one instruction decodes them either way). This file alone is compiled with
// AVX-512 enabled (CMake), so a build runs on CPUs without it. Sums are in another order than the
// AVX2 path's (results agree to fp32 rounding); DotRowsTokensAvx512 gives each token exactly what
// DotRowsAvx512 gives it alone.
#include "kernels/cpu/quant_internal.h"

#ifdef GLIMPSE_KERNELS_AVX512

#include <immintrin.h>

#include <vector>

namespace glimpse::kernels::internal {
namespace {

// As the AVX2 path: decode reads short interleaved streams the hardware prefetcher misses.
constexpr int64_t kPrefetchGroups = 2;

__m512 BroadcastHalf(const uint16_t* h) {
  return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(*h)));
}

// Sixteen int8 → 16 fp32 lanes.
__m512 SBytesToFloat(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// The 32 nibbles of a 4-bit block in element order: q[0] = elements 0..15 (low nibbles of
// qs[0..15]), q[1] = 16..31 (high nibbles). Bytes widen to int32 first: a shift needs no mask.
void NibblesToFloat(const uint8_t* qs, __m512 q[2]) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  q[0] = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0f)));
  q[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
}

// As quant_avx2.cc's formats, in 16 lanes.
struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Quants(const Block& blk, __m512 q[2]) {
    q[0] = SBytesToFloat(blk.qs);
    q[1] = SBytesToFloat(blk.qs + 16);
  }
  static __m512 Scale(const Block& blk) { return BroadcastHalf(&blk.d); }
  static __m512 Min(const Block&, __m512) { return _mm512_setzero_ps(); }
};
struct Q4_0Format {
  using Block = BlockQ4_0;
  static constexpr bool kHasMin = true;
  static void Quants(const Block& blk, __m512 q[2]) { NibblesToFloat(blk.qs, q); }
  static __m512 Scale(const Block& blk) { return BroadcastHalf(&blk.d); }
  static __m512 Min(const Block&, __m512 d) { return _mm512_mul_ps(d, _mm512_set1_ps(-8.0f)); }
};
struct Q4_1Format {
  using Block = BlockQ4_1;
  static constexpr bool kHasMin = true;
  static void Quants(const Block& blk, __m512 q[2]) { NibblesToFloat(blk.qs, q); }
  static __m512 Scale(const Block& blk) { return BroadcastHalf(&blk.d); }
  static __m512 Min(const Block& blk, __m512) { return BroadcastHalf(&blk.m); }
};

// One block's contribution to a token's accumulators: acc += d·(q0·x0 + q1·x1) and
// acc_min += min·Σx. DotBlockRows and DotBlockRowTokens both use it, so their per-token
// arithmetic is the same.
inline void Accumulate(const __m512 q[2], __m512 d, __m512 x0, __m512 x1, __m512& acc) {
  acc = _mm512_fmadd_ps(d, _mm512_fmadd_ps(q[1], x1, _mm512_mul_ps(q[0], x0)), acc);
}

// out[r] = Σ_b d_rb·Σ_j q_rbj·x_bj + m_rb·Σ_j x_bj for R rows of nb blocks; x and Σx are loaded
// once per block for all R rows.
template <typename Format, int R>
void DotBlockRows(float* out, const uint8_t* w, int64_t w_stride, const float* x, int64_t nb) {
  using Block = typename Format::Block;
  const Block* rows[R];
  __m512 acc[R], acc_min[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = reinterpret_cast<const Block*>(w + r * w_stride);
    acc[r] = acc_min[r] = _mm512_setzero_ps();
  }
  const int64_t ahead = kPrefetchGroups * R * w_stride;
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * QK), x1 = _mm512_loadu_ps(x + b * QK + 16);
    const __m512 sum_x = _mm512_add_ps(x0, x1);
    for (int r = 0; r < R; ++r) {
      const Block& blk = rows[r][b];
      _mm_prefetch(reinterpret_cast<const char*>(&blk) + ahead, _MM_HINT_T0);
      __m512 q[2];
      Format::Quants(blk, q);
      const __m512 d = Format::Scale(blk);
      Accumulate(q, d, x0, x1, acc[r]);
      if constexpr (Format::kHasMin)
        acc_min[r] = _mm512_fmadd_ps(Format::Min(blk, d), sum_x, acc_min[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], acc_min[r]));
}

// DotBlockRows<Format, 1> of one row for T tokens (x + t·n): each block decoded once for all T.
template <typename Format, int T>
void DotBlockRowTokens(float* out, int64_t out_stride, const uint8_t* w, int64_t w_stride,
                       const float* x, int64_t nb) {
  using Block = typename Format::Block;
  const Block* row = reinterpret_cast<const Block*>(w);
  const int64_t n = nb * QK;
  __m512 acc[T], acc_min[T];
  for (int t = 0; t < T; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
  const int64_t ahead = kPrefetchGroups * w_stride;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = row[b];
    _mm_prefetch(reinterpret_cast<const char*>(&blk) + ahead, _MM_HINT_T0);
    __m512 q[2];
    Format::Quants(blk, q);
    const __m512 d = Format::Scale(blk);
    const __m512 min = Format::Min(blk, d);
    for (int t = 0; t < T; ++t) {
      const float* xb = x + t * n + b * QK;
      const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
      Accumulate(q, d, x0, x1, acc[t]);
      if constexpr (Format::kHasMin)
        acc_min[t] = _mm512_fmadd_ps(min, _mm512_add_ps(x0, x1), acc_min[t]);
    }
  }
  for (int t = 0; t < T; ++t)
    out[t * out_stride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t], acc_min[t]));
}

template <typename Format, int T>
void DotBlockRowsTokens(float* out, int64_t out_stride, const uint8_t* w, int64_t w_stride,
                        int64_t rows, const float* x, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    DotBlockRowTokens<Format, T>(out + r, out_stride, w + r * w_stride, w_stride, x, n / QK);
}

template <typename Format>
void DotBlockTokens(float* out, int64_t out_stride, const uint8_t* w, int64_t w_stride,
                    int64_t rows, const float* x, int64_t m, int64_t n) {
  constexpr int kTokens = 4;  // 16 accumulators of 32 registers
  int64_t t = 0;
  for (; t + kTokens <= m; t += kTokens) {
    DotBlockRowsTokens<Format, kTokens>(out + t * out_stride, out_stride, w, w_stride, rows,
                                        x + t * n, n);
  }
  float* o = out + t * out_stride;
  const float* xt = x + t * n;
  switch (m - t) {
    case 7:
      return DotBlockRowsTokens<Format, 7>(o, out_stride, w, w_stride, rows, xt, n);
    case 6:
      return DotBlockRowsTokens<Format, 6>(o, out_stride, w, w_stride, rows, xt, n);
    case 5:
      return DotBlockRowsTokens<Format, 5>(o, out_stride, w, w_stride, rows, xt, n);
    case 4:
      return DotBlockRowsTokens<Format, 4>(o, out_stride, w, w_stride, rows, xt, n);
    case 3:
      return DotBlockRowsTokens<Format, 3>(o, out_stride, w, w_stride, rows, xt, n);
    case 2:
      return DotBlockRowsTokens<Format, 2>(o, out_stride, w, w_stride, rows, xt, n);
    case 1:
      return DotBlockRowsTokens<Format, 1>(o, out_stride, w, w_stride, rows, xt, n);
  }
}

template <typename Format>
void DotBlockRowsAll(float* out, const uint8_t* base, int64_t w_stride, int64_t rows,
                     const float* x, int64_t n) {
  constexpr int kRows = 4;  // rows per pass
  const int64_t nb = n / QK;
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows)
    DotBlockRows<Format, kRows>(out + r, base + r * w_stride, w_stride, x, nb);
  switch (rows - r) {
    case 3:
      return DotBlockRows<Format, 3>(out + r, base + r * w_stride, w_stride, x, nb);
    case 2:
      return DotBlockRows<Format, 2>(out + r, base + r * w_stride, w_stride, x, nb);
    case 1:
      return DotBlockRows<Format, 1>(out + r, base + r * w_stride, w_stride, x, nb);
  }
}

}  // namespace

void DotRowsAvx512(float* out, const void* w, int64_t w_stride, int64_t rows, DType type,
                   const float* x, int64_t n) {
  const uint8_t* base = static_cast<const uint8_t*>(w);
  switch (type) {
    case DType::kQ8_0:
      return DotBlockRowsAll<Q8_0Format>(out, base, w_stride, rows, x, n);
    case DType::kQ4_0:
      return DotBlockRowsAll<Q4_0Format>(out, base, w_stride, rows, x, n);
    case DType::kQ4_1:
      return DotBlockRowsAll<Q4_1Format>(out, base, w_stride, rows, x, n);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      break;
  }
  DotRowsAvx2(out, w, w_stride, rows, type, x, n);
}

void DotRowsTokensAvx512(float* out, int64_t out_stride, const void* w, int64_t w_stride,
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
  DotRowsTokensAvx2(out, out_stride, w, w_stride, rows, type, x, m, n);
}

}  // namespace glimpse::kernels::internal

#endif  // GLIMPSE_KERNELS_AVX512
